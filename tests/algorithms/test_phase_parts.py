"""Phases that train on a part of each client's samples, and alternating updates in one step.

Hand computations use the one-weight model ŷ = w·x with loss (w·x − y)², gradient 2x(w·x − y).
"""

import pytest
import torch

from pflpipe.algorithms.algorithm import Algorithm, Phase
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer


class Halves(Algorithm):
    """Records, per phase, the sum of the inputs it trained on (x = 1, 2, 4, 8: a bit each)."""

    kept = ("first", "second")

    def init_kept(self, global_params):
        return {"first": {"x": torch.tensor(0.0)}, "second": {"x": torch.tensor(0.0)}}

    def phases(self):
        return (Phase(objective=self.first_objective, part=(0.0, 0.5)),
                Phase(objective=self.second_objective, part=(0.5, 1.0)))

    def first_objective(self, state, batch, shared, hp, ctx):
        seen = (batch["x"].flatten() * batch["mask"]).sum()
        return ctx.task_loss(state["model"], batch), {"first": {"x": seen}}

    def second_objective(self, state, batch, shared, hp, ctx):
        seen = (batch["x"].flatten() * batch["mask"]).sum()
        return ctx.task_loss(state["model"], batch), {"second": {"x": seen}}


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_parts_of_a_round_are_disjoint_halves_of_each_clients_samples(line_ctx, clients,
                                                                      federate, trainer):
    # Prepare: two clients of four samples x = 1, 2, 4, 8; a batch covers a whole half, so the
    # recorded sum names the samples the phase saw (binary digits).
    data = clients([(1, 0), (2, 0), (4, 0), (8, 0)], [(1, 0), (2, 0), (4, 0), (8, 0)])

    # Execute
    result = federate(Halves(None, head=frozenset(), lr=0.1, local_epochs=1), line_ctx, data,
                      {"w": [0.0]}, trainer=trainer, rounds=3)

    # Assert: each half holds two samples, the halves are disjoint and cover the client
    for client in range(2):
        first = int(result.state["first"]["x"][client])
        second = int(result.state["second"]["x"][client])
        assert bin(first).count("1") == 2 and bin(second).count("1") == 2
        assert first & second == 0 and first | second == 15


def test_parts_are_the_same_for_both_trainers_and_reshuffled_every_round(line_ctx, clients,
                                                                         federate):
    data = clients(*[[(1, 0), (2, 0), (4, 0), (8, 0)]] * 6)
    algorithm = Halves(None, head=frozenset(), lr=0.1, local_epochs=1)

    batched = [federate(algorithm, line_ctx, data, {"w": [0.0]}, rounds=r) for r in (1, 2, 3)]
    sequential = federate(algorithm, line_ctx, data, {"w": [0.0]}, rounds=3,
                          trainer=SequentialTrainer)

    assert torch.equal(batched[-1].state["first"]["x"], sequential.state["first"]["x"])
    # over clients and rounds, more than one split is drawn
    splits = {int(v) for result in batched for v in result.state["first"]["x"]}
    assert len(splits) > 1


class Alternating(Algorithm):
    """Per step: a step of w on its task loss, then a step of v on (v − w)² with the new w."""

    kept = ("personal",)

    def init_kept(self, global_params):
        return {"personal": {"w": torch.tensor([0.0])}}

    def phases(self):
        return (Phase(then=((self.follow_objective, ("personal",)),)),)

    def follow_objective(self, state, batch, shared, hp, ctx):
        return ((state["personal"]["w"] - state["model"]["w"]) ** 2).sum()


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_then_updates_alternate_on_the_same_batch_with_the_fresh_values(line_ctx, clients,
                                                                        federate, trainer):
    # Prepare: one sample (1, 1), w = v = 0, lr 0.1, two local epochs (= two steps).
    # Step 1: w = 0 − 0.1·2(0 − 1) = 0.2;    v = 0 − 0.1·2(0 − 0.2) = 0.04
    # Step 2: w = 0.2 − 0.1·2(0.2 − 1) = 0.36; v = 0.04 − 0.1·2(0.04 − 0.36) = 0.104
    # (simultaneous updates would leave v = 0 after step 1.)
    # Execute
    result = federate(Alternating(None, head=frozenset(), lr=0.1, local_epochs=2), line_ctx,
                      clients([(1, 1)]), {"w": [0.0]}, trainer=trainer, local_epochs=2)

    # Assert: the reported train loss is the first objective's, (0 − 1)² and (0.2 − 1)²
    assert result.state["model"]["w"].item() == pytest.approx(0.36)
    assert result.state["personal"]["w"].item() == pytest.approx(0.104)
    (row,) = [r for r in result.rows if r["split"] == "train"]
    assert row["loss"] == pytest.approx((1 + 0.64) / 2)
