"""Ditto: the proximal personal objective, v kept across rounds and pulled to the received w."""

import pytest
import torch

from pflpipe.algorithms.ditto import Ditto
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import DittoParams


def _ditto(lr=0.1, **params):
    return Ditto(DittoParams(name="ditto", **params), head=frozenset(), lr=lr, local_epochs=1)


def test_ditto_personal_gradient_is_task_gradient_plus_lambda_times_distance(line_ctx):
    # Prepare: v = 0.5, received global w = 0, one sample (1, 1), λ = 0.2.
    # Loss (0.5 − 1)² + 0.1·(0.5 − 0)² = 0.25 + 0.025 = 0.275
    # Gradient 2(0.5 − 1) + 0.2·(0.5 − 0) = −1 + 0.1 = −0.9
    algorithm = _ditto(lam=0.2)
    v = torch.tensor([0.5], requires_grad=True)
    batch = {"x": torch.tensor([[1.0]]), "y": torch.tensor([1.0]), "mask": torch.ones(1)}
    state = {"model": {"w": torch.tensor([3.0])}, "personal": {"w": v}}

    # Execute: the client's own w (3.0) must play no part
    loss = algorithm.personal_objective(state, batch, {"global": {"w": torch.tensor([0.0])}}, {},
                                        line_ctx)
    (grad,) = torch.autograd.grad(loss, v)

    # Assert
    assert torch.allclose(loss, torch.tensor(0.275))
    assert torch.allclose(grad, torch.tensor([-0.9]))


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_ditto_two_rounds_match_hand_computed_global_and_personal_models(line_ctx, clients,
                                                                         federate, trainer):
    # Prepare: client 0 (1, 1), client 1 (1, −1); w = v = 0; lr 0.1; λ 1.
    # Round 1: w_0 = 0 − 0.1·2(0 − 1) = 0.2, w_1 = −0.2, global ½(0.2 − 0.2) = 0
    #          v_0 = 0 − 0.1·[2(0 − 1) + (0 − 0)] = 0.2, v_1 = −0.2
    # Round 2: w again 0.2 and −0.2, global 0
    #          v_0 = 0.2 − 0.1·[2(0.2 − 1) + (0.2 − 0)] = 0.2 + 0.14 = 0.34, v_1 = −0.34
    # (v reset to the global would give 0.2; a pull towards the trained w_0 = 0.2, 0.36.)
    algorithm = _ditto(lam=1.0)

    # Execute
    result = federate(algorithm, line_ctx, clients([(1, 1)], [(1, -1)]), {"w": [0.0]},
                      trainer=trainer, rounds=2)

    # Assert
    assert torch.allclose(result.global_params["w"], torch.tensor([0.0]), atol=1e-7)
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.2, -0.2]))
    assert torch.allclose(result.state["personal"]["w"].flatten(), torch.tensor([0.34, -0.34]))
    assert torch.allclose(result.best_params["w"].flatten(), torch.tensor([0.34, -0.34]))


def test_ditto_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                              differences):
    _, s, _ = digits_ds3
    algorithm = Ditto(DittoParams(name="ditto"), head=s.head, lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_ditto_records_personal_distance_and_compute_per_client_and_round(line_ctx, clients,
                                                                          federate, trainer):
    # Prepare: the two-round case above. ‖v − w‖ with w the global model the round began at (0):
    # round 1 |0.2 − 0| = 0.2 for both clients, round 2 |±0.34 − 0| = 0.34.
    # Compute: one sample per client, one step on w and one on v per round: 2 steps, 2 samples;
    # sent: w (one float32, 4 bytes); received: the global w (4 bytes), no server state.
    algorithm = _ditto(lam=1.0)

    # Execute
    result = federate(algorithm, line_ctx, clients([(1, 1)], [(1, -1)]), {"w": [0.0]},
                      trainer=trainer, rounds=2)

    # Assert
    train = {(r["round"], r["client"]): r for r in result.rows if r["split"] == "train"}
    assert sorted(train) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for (round_idx, _), row in train.items():
        assert row["diag.personal_distance"] == pytest.approx(0.2 if round_idx == 1 else 0.34)
        assert (row["steps"], row["samples"], row["bytes_sent"], row["bytes_received"]) == (
            2, 2, 4, 4)
