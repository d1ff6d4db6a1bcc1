"""Credentials never reach MLflow: no parameter, tag, run name or artifact holds one.

The test sets distinctive AWS credentials, uses them for real against the S3 server (the run's
checkpoints go there), tries hard to leak them through every tracker method, then reads back
everything the MLflow server holds for the pipeline run.
"""

import json
import os
import uuid
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from pflpipe.errors import TrackingError
from pflpipe.spec import parse_spec
from pflpipe.storage import open_store
from pflpipe.tracking import child_run, open_parent_run

pytestmark = pytest.mark.server

SECRET_KEY = "pflpipe-test-secret-Zq8vW3xK"
ACCESS_KEY_ID = "AKIAPFLPIPE7TEST9XYZ"
SESSION_TOKEN = "pflpipe-session-token-4b7e1c9d"
SECRETS = (SECRET_KEY, ACCESS_KEY_ID, SESSION_TOKEN)


def spec_text(tracking_uri: str, endpoint: str, bucket: str) -> str:
    return f"""\
experiment:
  name: secrets-test
dataset:
  name: digits
partition:
  strategy: iid
  n_clients: 2
storage:
  kind: s3
  bucket: {bucket}
  prefix: runs/secrets-test
  endpoint_url: {endpoint}
  secret_name: pflpipe-s3-credentials
tracking:
  uri: {tracking_uri}
  experiment: secrets-{uuid.uuid4().hex[:8]}
"""


def leak_everything(tracker, tmp_path) -> None:
    """Try every way a careless stage could hand a credential to the tracker."""
    tracker.log_params({"aws_secret_access_key": SECRET_KEY, "note": f"key={SECRET_KEY}",
                        "endpoint": f"http://user:{SECRET_KEY}@minio:9000", "id": ACCESS_KEY_ID})
    tracker.set_tags({"session": SESSION_TOKEN, "owner": f"{ACCESS_KEY_ID}/{SECRET_KEY}"})
    tracker.log_text(f"environment: {dict(os.environ)}", "debug/env.txt")
    tracker.log_dict(dict(os.environ), "debug/env.json")
    tracker.log_dict({"storage": {"token": SESSION_TOKEN}}, "debug/config.yaml")
    with tracker.child(f"client-0 {SECRET_KEY}", {"client_id": "0", "token": SESSION_TOKEN}):
        pass
    leaky = tmp_path / "leaky.txt"
    leaky.write_text(f"AWS_SECRET_ACCESS_KEY={SECRET_KEY}\n")
    with pytest.raises(TrackingError, match="AWS_SECRET_ACCESS_KEY"):
        tracker.log_artifact(leaky)
    tracker.log_state_dict({"w": torch.ones(3)}, "client_0000")


def everything_logged(client: MlflowClient, parent_id: str, experiment_id: str, tmp_path):
    """Yield (where, text) for every param, tag, run name and artifact of the pipeline run."""
    runs = [client.get_run(parent_id), *client.search_runs(
        [experiment_id], f"tags.root_run_id = '{parent_id}'")]
    for run in runs:
        where = f"run {run.info.run_name}"
        yield f"{where} name", run.info.run_name
        yield f"{where} params", json.dumps(run.data.params)
        yield f"{where} tags", json.dumps(run.data.tags)
        folder = client.download_artifacts(run.info.run_id, "", str(tmp_path / run.info.run_id))
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            yield f"{where} artifact {path.name}", path.read_bytes().decode("latin-1")


def test_no_credential_reaches_mlflow(mlflow_server, s3_server, bucket, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    text = spec_text(mlflow_server, s3_server, bucket)
    spec = parse_spec(text)

    parent = open_parent_run(spec, seed=0, spec_yaml=text + f"# by {ACCESS_KEY_ID}\n",
                             tags={"origin": f"https://ci:{SECRET_KEY}@git.example/repo"})
    with child_run(spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id,
                   "warm_start_fedavg") as stage:
        store = open_store(spec.storage, default_root=str(tmp_path)).child("checkpoints")
        store.put_bytes("round_0000.pt", b"weights")  # the credentials really are in use
        leak_everything(stage, tmp_path)
    parent.finish()

    logged = list(everything_logged(MlflowClient(mlflow_server), parent.run_id,
                                    parent.experiment_id, tmp_path / "download"))
    assert store.get_bytes("round_0000.pt") == b"weights"
    names = {where for where, _ in logged}
    assert {"run warm_start_fedavg artifact env.json", "run warm_start_fedavg artifact "
            "client_0000.pt"} <= names and any("spec.yaml" in name for name in names)
    leaks = [(where, secret) for where, text in logged for secret in SECRETS if secret in text]
    assert leaks == []
    stage_params = MlflowClient(mlflow_server).get_run(stage.run_id).data.params
    assert stage_params["aws_secret_access_key"] == "***"
    assert stage_params["endpoint"] == "http://user:***@minio:9000"
