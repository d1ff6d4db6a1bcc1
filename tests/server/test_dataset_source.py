"""A dataset whose `source` is an s3:// URI is downloaded from the S3 server, then partitioned."""

import io
import json

import boto3
import numpy as np
import pytest

from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data

pytestmark = pytest.mark.server


def npz_bytes(n: int = 120, d: int = 5, n_classes: int = 3) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (np.arange(n) % n_classes).astype(np.int64)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=y)
    return buffer.getvalue(), x


def test_partition_data_downloads_an_s3_dataset_source(s3_server, bucket, tmp_path):
    data, x = npz_bytes()
    boto3.client("s3", endpoint_url=s3_server).put_object(
        Bucket=bucket, Key="datasets/toy/data.npz", Body=data)
    root = tmp_path / "data"
    spec = parse_spec(f"""\
experiment:
  name: s3-source
dataset:
  name: arrays
  path: data.npz
  root: {root}
  source: s3://{bucket}/datasets/toy
partition:
  strategy: iid
  n_clients: 3
storage:
  kind: s3
  endpoint_url: {s3_server}
  bucket: {bucket}
  prefix: runs/s3-source
  max_attempts: 2
tracking:
  enabled: false
""")

    result = partition_data.run(spec, 0, tmp_path / "partition")

    assert (root / "data.npz").read_bytes() == data
    manifest = json.loads((tmp_path / "partition" / "manifest.json").read_text())
    assert manifest["dataset"]["n_samples"] == len(x)
    assert sum(client.n for client in result.clients) == len(x)


def test_stages_keep_checkpoints_and_results_in_the_s3_store(s3_server, bucket, tmp_path):
    """The warm start checkpoints every round into the bucket, and a rerun resumes from there;
    the collected results and the report are uploaded under results/."""
    from pflpipe.stages import collect_results, evaluate_fairness, train_local, warm_start_fedavg

    spec = parse_spec(f"""\
experiment: {{name: s3-stages, output_dir: {tmp_path / "results"}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 3, classes_per_client: 3}}
federation: {{rounds: 2}}
personalization: [{{name: local, epochs: 2}}]
storage: {{kind: s3, endpoint_url: {s3_server}, bucket: {bucket}, prefix: exp, max_attempts: 2}}
tracking: {{enabled: false}}
""")
    s3 = boto3.client("s3", endpoint_url=s3_server)

    def keys() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    partition_data.run(spec, 0, tmp_path / "partition")
    first = warm_start_fedavg.run(spec, 0, tmp_path / "partition", tmp_path / "ck",
                                  tmp_path / "fedavg")
    rounds = sorted(k.rsplit("/", 1)[1] for k in keys() if "/round_" in k)
    assert rounds == ["round_0000.pt", "round_0001.pt", "round_0002.pt"]
    assert first.store.startswith(f"s3://{bucket}/exp/checkpoints/warm_start_fedavg/")

    again = warm_start_fedavg.run(spec, 0, tmp_path / "partition", tmp_path / "ck2",
                                  tmp_path / "fedavg2")
    assert again == first  # read back from the bucket: the same rounds, the same scores
    train_local.run(spec, 0, tmp_path / "partition", tmp_path / "local")
    collect_results.run(spec, 0, [tmp_path / "fedavg", tmp_path / "local"], tmp_path / "seed0")
    evaluate_fairness.run(spec, [tmp_path / "seed0"], tmp_path / "report")

    stored = set(keys())
    assert {"exp/results/seed-0/results.csv", "exp/results/seed-0/local/results.csv",
            "exp/results/report/report.html", "exp/results/report/report.json"} <= stored
    body = s3.get_object(Bucket=bucket, Key="exp/results/seed-0/results.csv")["Body"].read()
    assert body == (tmp_path / "seed0" / "results.csv").read_bytes()
