"""The Kubeflow Trainer job of a sharded stage, checked against a golden manifest.

Regenerate after an intended change and review the diff::

    PFLPIPE_REGEN_GOLDEN=1 python -m pytest tests/pipeline/test_trainjob.py
"""

import os
from pathlib import Path

import yaml

from pflpipe.pipelines.trainjob import train_job
from pflpipe.spec import parse_spec

GOLDEN = Path(__file__).parent / "golden" / "trainjob-personalize.yaml"
SPEC = """\
experiment: {name: sharded}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 100}
personalization: [{name: scaffold}]
engine: {workers: 4}
storage: {kind: s3, bucket: pfl-runs, secret_name: s3-credentials}
resources:
  image: registry.example/pflpipe:0.1.0-cuda
  default: {cpu: "2", memory: 4Gi}
  personalize: {gpus: 1, memory_limit: 16Gi}
"""


def test_train_job_of_a_sharded_stage_matches_the_golden_manifest():
    # Prepare: 4 workers, one GPU each for personalize, S3 credentials from a secret
    spec = parse_spec(SPEC)
    # Execute
    job = train_job(spec, "personalize", "sharded-personalize-scaffold-0",
                    "s3://pfl-runs/tasks/personalize-scaffold-0")
    # Assert: the job's own numbers, then the whole manifest
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 4
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                           "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}}
    text = yaml.safe_dump(job, sort_keys=False)
    if os.environ.get("PFLPIPE_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), (
        "the TrainJob differs from the golden manifest; if intended, regenerate it with "
        "PFLPIPE_REGEN_GOLDEN=1 and review the diff")
