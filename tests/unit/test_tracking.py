"""Tracking without a server: URI resolution, the default sqlite store, scrubbing, no-op runs."""

import multiprocessing
import subprocess
import sys

import pytest

from pflpipe.errors import TrackingError
from pflpipe.spec import parse_spec
from pflpipe.tracking import (
    NULL_TRACKER,
    child_run,
    open_parent_run,
    resolve_tracking_uri,
)
from pflpipe.tracking.mlflow_tracker import MlflowTracker
from pflpipe.tracking.runs import flatten, parent_run_name
from pflpipe.tracking.scrub import credential_values, is_credential_key, scrub_mapping, scrub_text

BASE = """\
experiment:
  name: unit-tracking
dataset:
  name: digits
partition:
  strategy: iid
  n_clients: 2
"""


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def test_resolve_tracking_uri_defaults_to_sqlite_file_in_working_directory(in_tmp):
    assert resolve_tracking_uri(parse_spec(BASE).tracking) == f"sqlite:///{in_tmp}/mlflow.db"


def test_resolve_tracking_uri_prefers_spec_then_environment(in_tmp, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.kubeflow:5000")
    from_spec = parse_spec(BASE + "tracking:\n  uri: https://mlflow.example\n").tracking

    assert resolve_tracking_uri(from_spec) == "https://mlflow.example"
    assert resolve_tracking_uri(parse_spec(BASE).tracking) == "http://mlflow.kubeflow:5000"


def test_resolve_tracking_uri_makes_relative_sqlite_paths_absolute(in_tmp):
    tracking = parse_spec(BASE + "tracking:\n  uri: sqlite:///runs/mlflow.db\n").tracking

    assert resolve_tracking_uri(tracking) == f"sqlite:///{in_tmp}/runs/mlflow.db"


@pytest.mark.parametrize("uri", ["./mlruns", "file:///tmp/mlruns"])
def test_resolve_tracking_uri_refuses_the_file_store(in_tmp, uri, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    with pytest.raises(TrackingError, match="file store.*use sqlite:///mlflow.db"):
        resolve_tracking_uri()


def test_resolve_tracking_uri_refuses_in_memory_sqlite(in_tmp, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///:memory:")

    with pytest.raises(TrackingError, match="in-memory"):
        resolve_tracking_uri()


def test_open_parent_run_by_default_writes_mlflow_db_and_artifacts_beside_it(in_tmp):
    from mlflow import MlflowClient

    spec = parse_spec(BASE)
    parent = open_parent_run(spec, seed=3, spec_yaml=BASE)
    with child_run(spec.tracking, "", parent.experiment, parent.run_id, "partition_data") as run:
        run.log_metrics({"n_samples": 1797})
    parent.finish()

    client = MlflowClient(f"sqlite:///{in_tmp}/mlflow.db")
    run = client.get_run(parent.run_id)
    assert parent.tracking_uri == f"sqlite:///{in_tmp}/mlflow.db"
    assert run.info.artifact_uri.startswith((in_tmp / "mlartifacts").as_uri())
    assert (run.data.tags["seed"], run.data.tags["spec_hash"]) == ("3", spec.content_hash())
    assert client.get_experiment(parent.experiment_id).name == "unit-tracking"
    assert (in_tmp / "mlartifacts" / parent.run_id / "artifacts" / "spec.yaml").read_text() == BASE
    assert not (in_tmp / "mlruns").exists()
    assert parent.pipeline_parameters() == {"parent_run_id": parent.run_id,
                                            "tracking_uri": parent.tracking_uri,
                                            "experiment": "unit-tracking"}


def test_disabled_tracking_gives_empty_parent_and_null_children(in_tmp):
    spec = parse_spec(BASE + "tracking:\n  enabled: false\n")

    parent = open_parent_run(spec, seed=0)
    with child_run(spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id,
                   "partition_data") as tracker:
        tracker.log_metrics({"x": 1.0})
    parent.finish()

    assert parent.run_id == "" and tracker is NULL_TRACKER and parent.tracker() is NULL_TRACKER
    assert not (in_tmp / "mlflow.db").exists()


def test_log_history_rejects_text_values_naming_key_and_step():
    tracker = MlflowTracker(None, "run", "0", tracking_uri="sqlite:///unused.db")  # never reached

    with pytest.raises(TypeError, match="metric 'split' \\(step 2\\) must be a number"):
        tracker.log_history([{"round": 2, "loss": 0.1, "split": "val"}])


def _log_clients(args):
    tracking_uri, experiment, parent_run_id, stage = args
    spec = parse_spec(BASE)
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id, stage) as run:
        for client in range(4):
            with run.child(f"client-{client}", {"client_id": str(client)}) as client_run:
                client_run.log_history([{"round": r, "loss": 1.0 / (r + 1)} for r in range(5)])
    return stage


@pytest.mark.slow
def test_two_processes_log_into_one_sqlite_store(in_tmp):
    from mlflow import MlflowClient

    parent = open_parent_run(parse_spec(BASE))
    jobs = [(parent.tracking_uri, parent.experiment, parent.run_id, f"personalize/{name}")
            for name in ("ditto", "fedper")]

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert sorted(pool.map(_log_clients, jobs)) == ["personalize/ditto", "personalize/fedper"]

    runs = MlflowClient(parent.tracking_uri).search_runs(
        [parent.experiment_id], f"tags.root_run_id = '{parent.run_id}'")
    assert len(runs) == 2 * (1 + 4) and {r.info.status for r in runs} == {"FINISHED"}


RACER = """\
import pathlib, sys, time
from pflpipe.spec import parse_spec
from pflpipe.tracking import open_parent_run
import mlflow
spec = parse_spec(sys.argv[1])
ready = pathlib.Path(sys.argv[2])
(ready / sys.argv[3]).touch()
while len(list(ready.iterdir())) < int(sys.argv[4]):  # imports done: start together
    time.sleep(0.001)
open_parent_run(spec).finish()
"""


@pytest.mark.slow
def test_first_runs_racing_on_a_fresh_sqlite_store_all_succeed(in_tmp):
    """Three processes open their parent runs on a new database at the same moment; unguarded,
    MLflow's schema creation collides ("duplicate column name: step")."""
    from mlflow import MlflowClient

    ready = in_tmp / "ready"
    ready.mkdir()
    racers = [subprocess.Popen([sys.executable, "-c", RACER, BASE, str(ready), str(i), "3"],
                               cwd=in_tmp, stderr=subprocess.PIPE, text=True) for i in range(3)]

    errors = [racer.communicate(timeout=300)[1] for racer in racers]

    assert [racer.returncode for racer in racers] == [0] * 3, errors
    client = MlflowClient(f"sqlite:///{in_tmp}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("unit-tracking").experiment_id])
    assert len(runs) == 3 and {run.info.status for run in runs} == {"FINISHED"}


def test_flatten_spec_gives_dotted_keys():
    params = flatten(parse_spec(BASE).model_dump(mode="json", by_alias=True))

    assert params["partition.n_clients"] == "2"
    assert params["experiment.seeds"] == "[0]"
    assert params["personalization.0.name"] == "persfl"
    assert params["evaluation.baselines.global"] == "fedavg"

def test_parent_run_name_says_models_seeds_and_what_a_sweep_sweeps():
    base = BASE.replace("name: unit-tracking", "name: t")
    plain = parse_spec(base.replace("name: t", "name: t\n  seeds: [0, 1, 2]", 1)
                       + "personalization: [{name: fedper}, {name: local}]\n")
    sweep = parse_spec(base.replace("name: t", "name: t\n  seeds: [3]", 1)
                       + "sweep: {partition.n_clients: [2, 3, 4], federation.rounds: [1, 2]}\n")

    assert parent_run_name(plain) == "t · fedavg+fedper · seeds 0-2"
    assert parent_run_name(sweep) == (
        "t · sweep of partition.n_clients, federation.rounds (6 points) · fedavg+persfl · seed 3")


@pytest.mark.parametrize(("key", "is_credential"), [
    ("aws_secret_access_key", True), ("storage.access_key", True), ("MLFLOW_TRACKING_TOKEN", True),
    ("db_password", True), ("storage.secret_name", False), ("partition.alpha", False),
])
def test_is_credential_key(key, is_credential):
    assert is_credential_key(key) is is_credential


def test_scrub_text_redacts_environment_credentials_key_ids_and_url_passwords(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-123")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdefgh")

    text = scrub_text("a s3cr3t-value-123 b tok-abcdefgh c AKIAABCDEFGHIJKLMNOP d "
                      "postgresql://mlflow:pw@db:5432/mlflow")

    assert text == "a *** b *** c *** d postgresql://mlflow:***@db:5432/mlflow"


def test_credential_values_ignore_short_values(monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "1")

    assert "1" not in credential_values()


def test_scrub_mapping_redacts_credential_keys_and_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-123")

    clean = scrub_mapping({"aws_secret_access_key": "x", "note": "key s3cr3t-value-123",
                           "lr": 0.1, "missing": None})

    assert clean == {"aws_secret_access_key": "***", "note": "key ***", "lr": "0.1",
                     "missing": ""}


def test_import_of_tracking_and_storage_loads_neither_mlflow_nor_boto3():
    code = ("import sys, pflpipe.tracking, pflpipe.storage; print(sorted(m for m in "
            "('mlflow', 'boto3', 'botocore', 'torch') if m in sys.modules))")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)

    assert result.stdout.strip() == "[]"


def test_sqlite_store_is_written_in_wal_mode(in_tmp):
    import sqlite3

    open_parent_run(parse_spec(BASE)).finish()

    with sqlite3.connect(in_tmp / "mlflow.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_saved_model_pins_this_environment_and_mlflow_check_is_restored(tmp_path):
    import mlflow
    import torch
    from mlflow.utils import environment

    import pflpipe
    from pflpipe.tracking.mlflow_tracker import _save_torch_model

    check = environment.warn_dependency_requirement_mismatches

    _save_torch_model(torch.nn.Linear(2, 1), tmp_path / "model")

    requirements = (tmp_path / "model" / "requirements.txt").read_text().split()
    assert requirements == [f"mlflow=={mlflow.__version__}", f"pflpipe=={pflpipe.__version__}",
                            f"torch=={torch.__version__.split('+')[0]}"]
    assert environment.warn_dependency_requirement_mismatches is check
