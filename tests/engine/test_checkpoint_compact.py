"""A finished stage's checkpoint, compacted once its results are written (`checkpoint.compact`).

It keeps what reusing it reads: the state file drops the clients' states and last models, and
each client's best model is a hard link of the results' model file of that client. A reuse (a
rerun whose kfp cache missed) writes the same files without writing a checkpoint, also after
the results it was linked to are gone; a compacted checkpoint is never trained on.
"""

import filecmp
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from pflpipe import events, layout
from pflpipe.algorithms import FedAvg
from pflpipe.engine import checkpoint
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context
from pflpipe.errors import DataError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize, train_local, warm_start_fedavg
from pflpipe.storage.local_dir import LocalStore

SPEC = """\
experiment: {{name: compact, output_dir: {out}}}
dataset: {{name: synthetic, mean_samples: 2.0, sigma_samples: 0.5, min_samples: 20}}
partition: {{strategy: natural, n_clients: 6}}
federation: {{rounds: 3}}
personalization:
  - {{name: local, epochs: 3}}
  - {{name: ditto, rounds: 2}}
engine: {{device: cpu, compile: false, threads: 1}}
tracking: {{enabled: false}}
"""


def _notes(capsys) -> str:
    return "\n".join(e["text"] for e in map(events.parse, capsys.readouterr().out.splitlines())
                     if e is not None and e["event"] == "notice")


def _store(out: Path, stage: str) -> Path:
    (store,) = (out / "results" / layout.CHECKPOINTS / stage).iterdir()
    return store


def _same_files(a: Path, b: Path) -> None:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """A warm start, the local baseline and Ditto run once (results in ``first/``)."""
    out = tmp_path_factory.mktemp("compact")
    spec = parse_spec(SPEC.format(out=out / "results"))
    partition_data.run(spec, 0, out / "partition")
    warm_start_fedavg.run(spec, 0, out / "partition", out / "ck", out / "first" / "fedavg")
    train_local.run(spec, 0, out / "partition", out / "first" / "local")
    personalize.run(spec, 0, "ditto", out / "partition", out / "ck", out / "first" / "ditto")
    return out, spec


@pytest.mark.parametrize("stage, model", [("train_local", "local"), ("personalize", "ditto")])
def test_a_finished_stage_holds_its_best_models_once_as_links_of_its_results(stages, stage,
                                                                             model):
    out, _ = stages
    store = _store(out, stage)
    results = layout.client_model_files(out / "first" / model)
    linked = layout.client_model_files(store)
    assert [p.name for p in linked] == [p.name for p in results] and len(results) == 6
    assert all(os.path.samefile(a, b) for a, b in zip(linked, results, strict=True))
    (state,) = store.glob("state_*.pt")
    written = torch.load(state, weights_only=True)
    assert written[checkpoint.FINISHED] is True
    assert "state" not in written and "last_model" not in written
    assert written["best_model"] == {checkpoint.IN_FILES: [
        f"{layout.MODELS}/{p.name}" for p in results]}


def test_the_warm_start_keeps_its_best_models_in_its_state_file(stages):
    out, _ = stages
    store = _store(out, "warm_start_fedavg")
    written = torch.load(next(store.glob("state_*.pt")), weights_only=True)
    assert written[checkpoint.FINISHED] is True and "state" not in written
    assert not (store / layout.MODELS).exists()
    # every client's best model is the global model of a round: a reference or its rows
    for record in written["best_model"]["model"].values():
        assert len(record["pick"]) == 6


def test_a_compacted_stage_is_reused_to_the_same_files_without_writing_a_checkpoint(
        stages, capsys):
    # Prepare: what the checkpoints hold now, and the results they were linked to removed
    out, spec = stages
    stores = out / "results" / layout.CHECKPOINTS
    before = {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()}
    kept = out / "kept"
    shutil.copytree(out / "first", kept)
    shutil.rmtree(out / "first")
    capsys.readouterr()

    # Execute: each stage again (its kfp cache missed), into new folders
    warm_start_fedavg.run(spec, 0, out / "partition", out / "ck2", out / "again" / "fedavg")
    train_local.run(spec, 0, out / "partition", out / "again" / "local")
    personalize.run(spec, 0, "ditto", out / "partition", out / "ck", out / "again" / "ditto")

    # Assert: nothing trained or written into the checkpoints; the same files
    assert _notes(capsys).count("reused finished checkpoints") == 3
    assert {p: p.stat().st_mtime_ns for p in stores.rglob("*") if p.is_file()} == before
    for model in ("fedavg", "local", "ditto"):
        _same_files(kept / model, out / "again" / model)


def _federation(store: Path, rounds: int) -> tuple[Federation, dict]:
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 5, generator=generator) for n in (12, 7, 20)]
    ys = [torch.randint(0, 3, (len(x),), generator=generator) for x in xs]
    split = SplitData.from_clients(xs, ys)
    torch.manual_seed(0)
    ctx = Context(nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)))
    init = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
    plan = Plan(rounds=rounds, local_epochs=1, batch_size=4, lr=0.1, seed=1)
    federation = Federation(FedAvg(None, head=frozenset(), lr=0.1, local_epochs=1), ctx,
                            FederatedData(split, split, split), BatchedTrainer(ctx), plan,
                            LocalStore(store), "compact")
    return federation, init


def test_without_results_files_the_best_models_stay_in_the_state_file_never_trained_on(
        tmp_path):
    # Prepare: a finished run, compacted with no results files to link (as an S3 store is)
    federation, init = _federation(tmp_path, 3)
    finished = federation.run(init)
    assert checkpoint.compact(LocalStore(tmp_path)) is True
    assert checkpoint.compact(LocalStore(tmp_path)) is False   # once

    # Execute: reused; then asked for more rounds from it
    reused = _federation(tmp_path, 3)[0].run(init)
    longer, _ = _federation(tmp_path, 5)

    # Assert: the same best models, scores and rows; no client states; refused by name
    for key, tensor in finished.best_model["model"].items():
        assert torch.equal(reused.best_model["model"][key], tensor)
    assert all(torch.equal(reused.best[k], v) for k, v in finished.best.items())
    assert reused.rows == finished.rows and reused.state == {} and reused.last_model == {}
    with pytest.raises(DataError, match="compacted checkpoint .round 3. cannot be trained on "
                                        "to round 5"):
        longer.run(init)


class _Reading(LocalStore):
    """A local store that records the keys whose bytes it reads."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.read: list[str] = []

    def get_bytes(self, key: str) -> bytes:
        self.read.append(key)
        return super().get_bytes(key)


class _Unmapped(LocalStore):
    """A local store that cannot map its files (as a store without files cannot)."""

    local_path = None


def test_compacting_beside_the_results_maps_the_state_file_and_reads_no_model(tmp_path):
    # Prepare: one finished run in two stores; each client's results file
    federation, init = _federation(tmp_path / "mapped", 3)
    federation.run(init)
    shutil.copytree(tmp_path / "mapped", tmp_path / "read")
    files = []
    for i in range(3):
        files.append(tmp_path / f"client_{i:04d}.pt")
        torch.save({"w": torch.full((2,), float(i))}, files[-1])
    mapped = _Reading(tmp_path / "mapped")

    # Execute: compacted through the file's mapping, and through its bytes
    assert checkpoint.compact(mapped, files) is True
    assert checkpoint.compact(_Unmapped(tmp_path / "read"), files) is True

    # Assert: only the progress record read as bytes (the clients' trees it drops never
    # brought into memory, the global model not loaded); the same state file either way
    assert mapped.read == [layout.PROGRESS_JSON]
    (state,) = (tmp_path / "mapped").glob("state_*.pt")
    assert (tmp_path / "read" / state.name).read_bytes() == state.read_bytes()
    written = torch.load(state, weights_only=True)
    assert written["best_model"] == {checkpoint.IN_FILES: [f"{layout.MODELS}/{p.name}"
                                                           for p in files]}
    assert "state" not in written and "last_model" not in written


class _Writing(LocalStore):
    """A local store that records the keys written from bytes held whole in memory."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.from_bytes: list[str] = []

    def put_bytes(self, key: str, data: bytes) -> None:
        self.from_bytes.append(key)
        super().put_bytes(key, data)


def test_a_local_store_streams_each_checkpoint_into_its_file(tmp_path):
    # Prepare: a federation whose store records what arrives as bytes
    federation, init = _federation(tmp_path / "streamed", 3)
    store = federation.store = _Writing(tmp_path / "streamed")

    # Execute: train, checkpointing each round; then compact
    federation.run(init)
    checkpoint.compact(store, None)

    # Assert: only the progress records came as bytes; the tensors' files were streamed, and
    # they load as the same checkpoint
    assert set(store.from_bytes) == {layout.PROGRESS_JSON}
    resumed = checkpoint.resume(store, federation.fingerprint, torch.device("cpu"))
    assert resumed["round"] == 3 and resumed[checkpoint.FINISHED] is True
