"""Checkpointing every n rounds: fewer writes, the same result after a resume."""

import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.storage.local import LocalStore


def test_states_are_checkpointed_every_n_rounds_and_resume_to_the_same_result(ds3, tmp_path):
    # Prepare: FedAvg on ds3, 10 % of the clients per round, state checkpoints every 2 rounds
    _, s = ds3
    algorithm = FedAvg(None, head=s.head, lr=0.05, local_epochs=1)
    written = {}

    def run(rounds, where, **plan):
        store = LocalStore(tmp_path / where)

        def on_round(round_idx, rows):
            written[(where, round_idx)] = sorted(k for k in store.list() if k.startswith("state"))

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
        ["state_0000.pt"], ["state_0002.pt"], ["state_0003.pt"]]
    assert written[("resumed", 4)] == ["state_0004.pt"]   # resumed from round 3
    assert all(torch.equal(clean.global_params[k], resumed.global_params[k])
               for k in clean.global_params)
    assert torch.equal(clean.best["test_accuracy"], resumed.best["test_accuracy"])
