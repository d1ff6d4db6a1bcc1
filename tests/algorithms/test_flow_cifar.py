"""specs/flow-cifar10-dir01.yaml end to end through the stages, on small CIFAR-10 files."""

import pickle
from pathlib import Path

import numpy as np

from pflpipe.spec import parse_spec
from pflpipe.stages import (
    collect_results,
    evaluate_fairness,
    partition_data,
    personalize,
    train_local,
    warm_start_fedavg,
)
from pflpipe.training import csv_tables

SPEC = Path(__file__).parents[2] / "specs" / "flow-cifar10-dir01.yaml"


def write_cifar10(root: Path, n_train: int, n_test: int) -> None:
    """torchvision's on-disk CIFAR-10: five pickled train batches, a test batch, the meta file."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)

    def batch(name: str, n: int) -> None:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.permutation(np.arange(n) % 10)]
        (folder / name).write_bytes(pickle.dumps({"data": data, "labels": labels}))

    for b in range(5):
        batch(f"data_batch_{b + 1}", n_train // 5)
    batch("test_batch", n_test)
    (folder / "batches.meta").write_bytes(
        pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))


def test_the_cifar_spec_runs_through_the_stages_and_records_flows_routing(tmp_path):
    # Prepare: the shipped spec (its Dirichlet(0.1) split of 120 images per client, its model,
    # optimizer and Flow entry) shortened to 4 clients, 2 rounds of 2 clients, on 600 random
    # images in CIFAR-10's real file format (no download; checksums off for these files)
    write_cifar10(tmp_path / "cifar10", n_train=500, n_test=100)
    spec = parse_spec(SPEC.read_text(), overrides={
        "dataset.root": str(tmp_path / "cifar10"), "dataset.allow_download": False,
        "dataset.verify_checksums": False, "partition.n_clients": 4,
        "federation.rounds": 2, "federation.client_fraction": 0.5,
        "federation.full_eval_every": 2, "engine.device": "cpu", "engine.threads": 1,
        "engine.checkpoint_every": 1, "tracking.enabled": False,
        "personalization": [{"name": "flow", "warm_start": "none"}],
        "storage": {"kind": "local", "path": str(tmp_path / "store")}})
    partition = tmp_path / "partition"

    # Execute
    partition_data.run(spec, 0, partition)
    warm_start_fedavg.run(spec, 0, partition, tmp_path / "checkpoints", tmp_path / "fedavg")
    train_local.run(spec, 0, partition, tmp_path / "local")
    personalize.run(spec, 0, "flow", partition, tmp_path / "checkpoints", tmp_path / "flow")
    collect_results.run(spec, 0, [tmp_path / m for m in ("fedavg", "local", "flow")],
                        tmp_path / "collected", partition_dir=partition,
                        checkpoints_dir=tmp_path / "checkpoints")
    evaluate_fairness.run(spec, [tmp_path / "collected"], tmp_path / "report")

    # Assert: Flow routed cnn_cifar's 5 parametric layers (K = 5: conv1, conv2, fc1-fc3): its
    # history has, for each client it trained in each round, every layer's mean π_g and share
    # routed to global, each in [0, 1]; the report tables them. No accuracy is claimed.
    history = [r for r in csv_tables.read_csv(tmp_path / "flow" / "history.csv")
               if r["split"] == "train"]
    columns = [f"diag.{name}.{k}" for name in ("pi_global", "to_global") for k in range(5)]
    assert sorted({int(r["round"]) for r in history}) == [1, 2]
    assert len(history) == 4                 # 2 clients per round
    assert all(0.0 <= float(r[c]) <= 1.0 for r in history for c in columns)
    assert "diag.pi_global.5" not in history[0]
    markdown = (tmp_path / "report" / "report.md").read_text()
    for column in columns:
        assert f"| flow | {column.removeprefix('diag.')} | 2 |" in markdown
