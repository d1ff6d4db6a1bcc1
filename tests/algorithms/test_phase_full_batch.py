"""Interface additions for pFedVEM/pFedBayes: full-batch phases and the round's seed.

Hand computations use the one-weight model ŷ = w·x with loss (w·x − y)², gradient 2x(w·x − y).
"""

import pytest
import torch

from pflpipe.algorithms.algorithm import Algorithm, Phase
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer


class FullBatch(Algorithm):
    """FedAvg whose local training is two full-batch steps, whatever the plan's batch size."""

    def phases(self):
        return (Phase(full_batch=True, epochs=2),)


class SeedLog(Algorithm):
    """Appends each round's seed to the server state."""

    def init_server(self, global_params, n_clients):
        return {"seeds": {"all": torch.zeros(0, dtype=torch.long)}}

    def server_step(self, round):
        new, _ = super().server_step(round)
        seeds = torch.cat([round.server["seeds"]["all"], torch.tensor([round.seed])])
        return new, {"seeds": {"all": seeds}}


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_full_batch_phase_takes_one_step_per_epoch_on_all_samples(line_ctx, clients, federate,
                                                                  trainer):
    # Prepare: batch size 1 in the plan; w = 0, lr 0.1.
    # Client 0, (1, 1) and (2, 0): mean gradient −1 → 0.1; then (−1.8 + 0.8)/2 = −0.5 → 0.15.
    # Client 1, (1, −1): gradient 2 → −0.2; then 1.6 → −0.36. Server: (2·0.15 − 0.36)/3 = −0.02.
    data = clients([(1, 1), (2, 0)], [(1, -1)])

    # Execute
    result = federate(FullBatch(None, head=frozenset(), lr=0.1, local_epochs=1), line_ctx, data,
                      {"w": [0.0]}, trainer=trainer, batch_size=1)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.15, -0.36]))
    assert torch.allclose(result.global_params["w"], torch.tensor([-0.02]))


def test_round_seed_depends_on_the_run_seed_and_the_round_only(line_ctx, clients, federate):
    data = clients([(1, 1)], [(1, -1)])
    algorithm = SeedLog(None, head=frozenset(), lr=0.1, local_epochs=1)

    first = federate(algorithm, line_ctx, data, {"w": [0.0]}, rounds=3)
    again = federate(algorithm, line_ctx, data, {"w": [0.0]}, rounds=3,
                     trainer=SequentialTrainer)
    other = federate(algorithm, line_ctx, data, {"w": [0.0]}, rounds=3, seed=1)

    seeds = first.server["seeds"]["all"]
    assert torch.equal(seeds, again.server["seeds"]["all"])
    assert len(set(seeds.tolist())) == 3
    assert not set(seeds.tolist()) & set(other.server["seeds"]["all"].tolist())
