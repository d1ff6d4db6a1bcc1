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
