"""A finished stage's checkpoint in an S3 store is compacted too (`checkpoint.compact`): S3 has
no hard links, so its best models stay in the state file (as references or rows); a reuse
writes the same results."""

import filecmp
import io

import torch

from pflpipe import layout
from pflpipe.engine import checkpoint
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, train_local
from pflpipe.storage.s3 import S3Store

SPEC = """\
experiment: {{name: compact-s3, output_dir: {out}}}
dataset: {{name: synthetic, mean_samples: 2.0, sigma_samples: 0.5, min_samples: 20}}
partition: {{strategy: natural, n_clients: 5}}
personalization:
  - {{name: local, epochs: 3}}
engine: {{device: cpu, compile: false, threads: 1}}
tracking: {{enabled: false}}
storage: {{kind: s3, bucket: {bucket}, prefix: run, endpoint_url: {endpoint}}}
"""


def test_an_s3_checkpoint_keeps_its_best_models_in_its_state_file(tmp_path, s3_server, bucket,
                                                                   capsys):
    # Prepare and execute: the local baseline, then again (reused) into another folder
    spec = parse_spec(SPEC.format(out=tmp_path / "results", bucket=bucket, endpoint=s3_server))
    partition_data.run(spec, 0, tmp_path / "partition")
    train_local.run(spec, 0, tmp_path / "partition", tmp_path / "first")
    capsys.readouterr()
    train_local.run(spec, 0, tmp_path / "partition", tmp_path / "again")
    assert "reused finished checkpoints" in capsys.readouterr().out

    # Assert: compacted, no model files in the bucket, the same results
    store = S3Store(bucket, endpoint_url=s3_server)
    keys = store.list("run")
    assert not [key for key in keys if f"/{layout.MODELS}/" in key]
    (state,) = [key for key in keys if layout.is_state_key(key.rsplit("/", 1)[1])]
    written = torch.load(io.BytesIO(store.get_bytes(state)), weights_only=True)
    assert written[checkpoint.FINISHED] is True and "state" not in written
    assert all(checkpoint.REF in record for record in written["best_model"]["model"].values())
    first = sorted(p.relative_to(tmp_path / "first") for p in (tmp_path / "first").rglob("*")
                   if p.is_file())
    assert len([p for p in first if p.parent.name == layout.MODELS]) == 5
    assert all(filecmp.cmp(tmp_path / "first" / p, tmp_path / "again" / p, shallow=False)
               for p in first)
