"""A federated stage run as 2 gloo workers on 127.0.0.1 equals the same stage run as 1 process.

Real worker processes (``python -m pflpipe.engine.distributed``), real torch.distributed (gloo),
real checkpoints; a worker killed with SIGKILL leaves checkpoints a rerun resumes from.
"""

import os
import pickle
import signal
from pathlib import Path

import pytest
import torch

from pflpipe.engine.distributed import shard_bounds
from pflpipe.errors import DivergenceError, WorkerError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize, train_local, warm_start_fedavg
from pflpipe.training import csv_tables

SPEC = """\
experiment: {{name: workers, output_dir: {root}/out}}
dataset: {{name: digits}}
partition: {{strategy: ds3, n_clients: 10, min_samples: 10}}
federation: {{rounds: 3, batch_size: 16, lr: 0.05}}
personalization: [{{name: scaffold, rounds: 3}}]
tracking: {{enabled: false}}
engine: {{device: {device}, workers: {workers}}}
storage: {{kind: local, path: {root}/store-{name}}}
"""


def _spec(root: Path, workers: int, name: str, device: str):
    return parse_spec(SPEC.format(root=root, workers=workers, name=name, device=device))


def _stages(spec, root: Path, name: str, on_round=None) -> Path:
    """Warm start (FedAvg), SCAFFOLD from its final model, the local baseline; return the
    output folder.
    """
    out = root / name
    warm_start_fedavg.run(spec, 0, root / "partition", out / "checkpoints", out / "fedavg",
                          on_round=on_round)
    personalize.run(spec, 0, "scaffold", root / "partition", out / "checkpoints",
                    out / "scaffold")
    train_local.run(spec, 0, root / "partition", out / "local")
    return out


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory, test_device):
    """(root, output folder, device) of the stages run as one process."""
    root = tmp_path_factory.mktemp("workers")
    partition_data.run(_spec(root, 1, "one", test_device), 0, root / "partition")
    return root, _stages(_spec(root, 1, "one", test_device), root, "one"), test_device


def _assert_same_results(a: Path, b: Path) -> None:
    for stage in ("fedavg", "scaffold", "local"):
        rows_a, rows_b = (csv_tables.read_csv(out / stage / "results.csv") for out in (a, b))
        # selections × splits × clients, and SCAFFOLD's global model scored beside (scope)
        assert len(rows_a) == len(rows_b) == 2 * 2 * 10 * (2 if stage == "scaffold" else 1)
        keys = ("client", "split", "selection", "round", "scope")
        for row_a, row_b in zip(rows_a, rows_b, strict=True):
            assert {k: row_a.get(k) for k in keys} == {k: row_b.get(k) for k in keys}
            for column in ("accuracy", "loss"):
                assert float(row_a[column]) == pytest.approx(float(row_b[column]), abs=1e-5)
    for model in ["fedavg/models/global.pt", *(f"{stage}/models/client_{c:04d}.pt"
                                              for stage in ("scaffold", "local")
                                              for c in range(10))]:
        params_a, params_b = (torch.load(out / model) for out in (a, b))
        for key in params_a:
            torch.testing.assert_close(params_a[key], params_b[key], atol=1e-5, rtol=1e-4)


def test_shard_bounds_cut_contiguous_shards_of_even_work():
    # cumulative work 1, 2, 3, 4 → half (2) is reached after member 1; 3 members of 1, 1, 10
    # → a third (4) and two thirds (8) are both reached at member 2
    assert shard_bounds(torch.tensor([1, 1, 1, 1]), 2) == [0, 2, 4]
    assert shard_bounds(torch.tensor([1, 1, 10]), 3) == [0, 3, 3, 3]
    assert shard_bounds(torch.tensor([5]), 2) == [0, 1, 1]
    assert shard_bounds(torch.tensor([], dtype=torch.long), 2) == [0, 0, 0]


def test_divergence_error_keeps_client_and_round_through_pickle():
    # a worker sends the library error it raised to the launcher pickled
    error = pickle.loads(pickle.dumps(DivergenceError("client 3, round 2: NaN", 3, 2)))
    assert (str(error), error.client, error.round_idx) == ("client 3, round 2: NaN", 3, 2)


def test_two_gloo_workers_give_one_process_results_for_fedavg_scaffold_and_local(one_worker):
    # Prepare: the same spec, engine.workers 2
    root, one, device = one_worker
    # Execute
    two = _stages(_spec(root, 2, "two", device), root, "two")
    # Assert: the global FedAvg model, SCAFFOLD's and the local baseline's per-client models
    # and every client's scores
    _assert_same_results(one, two)


def _worker_pid(rank: int) -> int:
    """The pid of this process's worker child of `rank` (its environment says RANK)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == os.getpid() and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no worker of rank {rank}")


def test_a_worker_killed_with_sigkill_leaves_checkpoints_a_rerun_resumes(one_worker):
    # Prepare: 2 workers; once round 2 of 3 is reported, worker 1 is killed with SIGKILL
    root, one, device = one_worker
    spec = _spec(root, 2, "killed", device)
    out = root / "killed"

    def kill_worker_1(round_idx, rows):
        if round_idx == 2:
            os.kill(_worker_pid(1), signal.SIGKILL)

    with pytest.raises(WorkerError, match="worker 1 of the sharded stage was killed by signal 9"):
        warm_start_fedavg.run(spec, 0, root / "partition", out / "checkpoints", out / "fedavg",
                              on_round=kill_worker_1)
    # Execute: run it again; it reports only the rounds it trains
    resumed = []
    warm_start_fedavg.run(spec, 0, root / "partition", out / "checkpoints", out / "fedavg",
                          on_round=lambda round_idx, rows: resumed.append(round_idx))
    # Assert: it went on from round 2 and ends as one uninterrupted process does
    assert resumed == [3]
    for name in ("results.csv", "history.csv"):
        rows_a, rows_b = (csv_tables.read_csv(o / "fedavg" / name) for o in (out, one))
        assert [r["round"] for r in rows_a] == [r["round"] for r in rows_b]
        for row_a, row_b in zip(rows_a, rows_b, strict=True):
            assert float(row_a["loss"]) == pytest.approx(float(row_b["loss"]), abs=1e-5)
    torch.testing.assert_close(torch.load(out / "fedavg/models/global.pt"),
                               torch.load(one / "fedavg/models/global.pt"),
                               atol=1e-5, rtol=1e-4)
