"""The Kubeflow Trainer job of a sharded stage, checked against a golden manifest.

Regenerate after an intended change and review the diff::

    PFLPIPE_REGEN_GOLDEN=1 python -m pytest tests/pipeline/test_trainjob.py
"""

import os
from pathlib import Path

import pytest
import yaml

from pflpipe.pipelines.trainjob import train_job
from pflpipe.spec import parse_spec
from pflpipe.spec.sections import LocalStorage

GOLDEN = Path(__file__).parent / "golden" / "trainjob-personalize.yaml"
#: Where a component writes the task: `distributed.task_store` under the stage's checkpoints.
TASK = "s3://pfl-runs/studies/checkpoints/personalize/0123456789abcdef/workers/fedcba9876543210"
SPEC = """\
experiment: {name: sharded}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 100}
personalization: [{name: scaffold}]
engine: {workers: 4}
storage: {kind: s3, bucket: pfl-runs, prefix: studies, endpoint_url: "http://minio.minio:9000",
          region: eu-west-1, secret_name: s3-credentials}
resources:
  image: registry.example/pflpipe:0.1.0-cuda
  default: {cpu: "2", memory: 4Gi}
  personalize: {gpus: 1, memory_limit: 16Gi}
"""


def test_train_job_of_a_sharded_stage_matches_the_golden_manifest():
    # Prepare: 4 workers, one GPU each for personalize, a MinIO store, credentials from a secret
    spec = parse_spec(SPEC)
    # Execute
    job = train_job(spec, "personalize", "sharded-personalize-scaffold-0", TASK)
    # Assert: the job's own numbers, then the whole manifest
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "--module", "pflpipe.engine.distributed", TASK]
    assert [variable["name"] for variable in trainer["env"]] == [
        "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert trainer["env"][0]["value"] == "http://minio.minio:9000"
    assert trainer["numNodes"] == 4
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                           "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}}
    text = yaml.safe_dump(job, sort_keys=False)
    if os.environ.get("PFLPIPE_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "the TrainJob differs from the golden manifest; if intended, regenerate it with "
        "PFLPIPE_REGEN_GOLDEN=1 and review the diff")


def test_train_job_needs_s3_storage_and_a_task_in_its_bucket():
    s3 = parse_spec(SPEC)
    local = s3.model_copy(update={"storage": LocalStorage(kind="local")})
    with pytest.raises(ValueError, match="storage.kind is 'local': a Trainer job's workers run"):
        train_job(local, "personalize", "job", TASK)
    with pytest.raises(ValueError, match="not in the spec's bucket s3://pfl-runs/"):
        train_job(s3, "personalize", "job", "/tmp/pflpipe-workers-x")
