"""Checkpointing every n rounds: fewer writes, the same result after a resume."""

import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.storage.local_dir import LocalStore


def test_states_are_checkpointed_every_n_rounds_and_resume_to_the_same_result(ds3, tmp_path):
    # Prepare: FedAvg on ds3, 10 % of the clients per round, state checkpoints every 2 rounds
    _, s = ds3
    algorithm = FedAvg(None, head=s.head, lr=0.05, local_epochs=1)
    written = {}

    def run(rounds, where, **plan):
        store = LocalStore(tmp_path / where)

        def on_round(round_idx, rows):
            written[(where, round_idx)] = sorted(k for k in store.list()
                                                 if k.startswith(("state", "rows")))

        plan = Plan(rounds=rounds, local_epochs=1, batch_size=16, lr=0.05, seed=0,
                    client_fraction=0.3, **plan)
        return Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), plan, store, "key",
                          on_round).run(s.init)

    # Execute: 5 rounds at once; 3 rounds (checkpointed at 2 and 3) resumed to 5
    clean = run(5, "clean")
    run(3, "resumed", checkpoint_every=2)
    resumed = run(5, "resumed", checkpoint_every=2)

    # Assert
    assert [written[("resumed", r)] for r in (1, 2, 3)] == [
        ["rows_0000.pt", "state_0000.pt"], ["rows_0000.pt", "rows_0002.pt", "state_0002.pt"],
        ["rows_0000.pt", "rows_0002.pt", "rows_0003.pt", "state_0003.pt"]]
    assert written[("resumed", 4)] == [   # resumed from round 3
        "rows_0000.pt", "rows_0002.pt", "rows_0003.pt", "rows_0004.pt", "state_0004.pt"]
    assert clean.rows == resumed.rows
    assert all(torch.equal(clean.global_params[k], resumed.global_params[k])
               for k in clean.global_params)
    assert torch.equal(clean.best["test_accuracy"], resumed.best["test_accuracy"])


def _federation(s, store, rounds, **plan):
    algorithm = FedAvg(None, head=s.head, lr=0.05, local_epochs=1)
    plan = Plan(rounds=rounds, local_epochs=1, batch_size=16, lr=0.05, seed=0,
                client_fraction=0.3, **plan)
    return Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), plan, store, "key")


def test_each_rows_file_holds_only_the_rows_since_the_previous_checkpoint(ds3, tmp_path):
    # Prepare: 10 clients, 3 of them train a round; rounds 0 and 2 score every client's
    # val and test (full evaluation at the first and last round), round 1 the 3 trained ones
    _, s = ds3
    store = LocalStore(tmp_path / "store")

    # Execute
    result = _federation(s, store, 2).run(s.init)

    # Assert: round 0 wrote its 20 score rows, round 1 its own rows only, round 2 its own:
    # every row written once (before, each round rewrote every row of the run so far)
    chunks = [torch.load(tmp_path / "store" / f"rows_{r:04d}.pt", weights_only=True)
              for r in (0, 1, 2)]
    assert [{row["round"] for row in chunk} for chunk in chunks] == [{0}, {1}, {2}]
    assert sum(chunks, []) == result.rows


def test_a_stale_rows_file_of_a_killed_run_is_not_read_back(ds3, tmp_path):
    # Prepare: a run checkpointed at round 2 whose store also holds rows_0003.pt of a round 3
    # killed before its progress marker (and a state file of the older layout is not involved)
    _, s = ds3
    store = LocalStore(tmp_path / "store")
    clean = _federation(s, LocalStore(tmp_path / "clean"), 4).run(s.init)
    _federation(s, store, 2).run(s.init)
    (tmp_path / "store" / "rows_0003.pt").write_bytes(
        (tmp_path / "store" / "rows_0002.pt").read_bytes())

    # Execute: resume to round 4, checkpointing every 2 rounds (so round 3 writes no rows file)
    resumed = _federation(s, store, 4, checkpoint_every=2).run(s.init)

    # Assert
    assert resumed.rows == clean.rows
    assert sorted(p.name for p in (tmp_path / "store").glob("rows_*")) == [
        "rows_0000.pt", "rows_0001.pt", "rows_0002.pt", "rows_0004.pt"]


def test_a_checkpoint_of_the_older_layout_resumes_with_its_rows(ds3, tmp_path):
    # Prepare: a checkpoint of round 2 as main wrote it before rows went in chunks: every row
    # inside state_0002.pt, no rows files
    _, s = ds3
    store = LocalStore(tmp_path / "old")
    clean = _federation(s, LocalStore(tmp_path / "clean"), 4).run(s.init)
    first = _federation(s, store, 2).run(s.init)
    state = torch.load(tmp_path / "old" / "state_0002.pt", weights_only=True)
    del state["row_chunks"]
    torch.save({**state, "rows": first.rows}, tmp_path / "old" / "state_0002.pt")
    for path in (tmp_path / "old").glob("rows_*"):
        path.unlink()

    # Execute
    resumed = _federation(s, store, 4).run(s.init)

    # Assert
    assert resumed.rows == clean.rows
    assert all(torch.equal(clean.global_params[k], resumed.global_params[k])
               for k in clean.global_params)
