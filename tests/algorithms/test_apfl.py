"""APFL: the mixed model, where each gradient lands, and α's projected step."""

import pytest
import torch

from pflpipe.algorithms.apfl import Apfl
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import ApflParams


def _apfl(lr=0.1, **params):
    return Apfl(ApflParams(name="apfl", **params), head=frozenset(), lr=lr, local_epochs=1)


def _batch(x, y):
    return {"x": torch.tensor([[float(x)]]), "y": torch.tensor([float(y)]), "mask": torch.ones(1)}


def _state(w, v, alpha):
    return {"model": {"w": torch.tensor([w], requires_grad=True)},
            "personal": {"w": torch.tensor([v], requires_grad=True)},
            "alpha": {"value": torch.tensor(alpha)}}


def test_apfl_personalized_model_is_the_alpha_mixture_of_v_and_w():
    state = _state(-1.0, 1.0, 0.25)

    mixed = _apfl().personalized(state, {})

    # 0.25·1 + 0.75·(−1) = −0.5
    assert torch.allclose(mixed["w"], torch.tensor([-0.5]))


def test_apfl_step_gives_w_its_own_gradient_v_the_mixture_gradient_and_moves_alpha(line_ctx):
    # Prepare: w = 0, v = 1, α = 0.25, sample (1, 1), α's step size 0.1.
    # v̄ = 0.25·1 + 0.75·0 = 0.25; ∇f(v̄) = 2(0.25 − 1) = −1.5
    # ∇_w = ∇f(w) = 2(0 − 1) = −2 (w is held fixed inside the mixture)
    # ∇_v = α·∇f(v̄) = −0.375
    # ∂f(v̄)/∂α = ⟨∇f(v̄), v − w⟩ = −1.5 -> α = 0.25 − 0.1·(−1.5) = 0.4
    # loss f(w) + f(v̄) = 1 + 0.5625
    algorithm = _apfl(adaptive=True, alpha_lr=0.1)
    state = _state(0.0, 1.0, 0.25)

    # Execute
    loss, updates = algorithm.local_objective(state, _batch(1, 1), {}, {}, line_ctx)
    grad_w, grad_v = torch.autograd.grad(loss, [state["model"]["w"], state["personal"]["w"]])

    # Assert
    assert torch.allclose(loss, torch.tensor(1.5625))
    assert torch.allclose(grad_w, torch.tensor([-2.0]))
    assert torch.allclose(grad_v, torch.tensor([-0.375]))
    assert torch.allclose(updates["alpha"]["value"], torch.tensor(0.4))


def test_apfl_alpha_is_projected_onto_the_unit_interval_and_can_come_back(line_ctx):
    # Prepare: w = 0, v = 2, α = 0.9, step 0.1.
    # Sample (1, 3): v̄ = 1.8, ∇f = 2(1.8 − 3) = −2.4, slope −2.4·2 = −4.8
    #   -> 0.9 + 0.48 = 1.38, projected to 1
    # Sample (1, 0) at α = 1: v̄ = 2, ∇f = 4, slope 8 -> 1 − 0.8 = 0.2
    algorithm = _apfl(adaptive=True, alpha_lr=0.1)

    # Execute
    _, first = algorithm.local_objective(_state(0.0, 2.0, 0.9), _batch(1, 3), {}, {}, line_ctx)
    alpha = float(first["alpha"]["value"])
    _, second = algorithm.local_objective(_state(0.0, 2.0, alpha), _batch(1, 0), {}, {},
                                          line_ctx)

    # Assert
    assert alpha == 1.0
    assert torch.allclose(second["alpha"]["value"], torch.tensor(0.2))


def test_apfl_fixed_alpha_stays_put(line_ctx):
    algorithm = _apfl(alpha=0.25)

    output = algorithm.local_objective(_state(0.0, 1.0, 0.25), _batch(1, 1), {}, {}, line_ctx)

    assert isinstance(output, torch.Tensor)     # no update of α is returned


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_apfl_adaptive_round_matches_hand_computed_steps(line_ctx, clients, federate, trainer):
    # Prepare: one client, one sample (1, 1), w = v = 0, α 0.25, lr (and α's step) 0.1, 2 steps.
    # Step 1: v̄ = 0, ∇f(v̄) = −2; w = 0.2, v = 0 + 0.1·0.25·2 = 0.05; slope ⟨−2, v − w = 0⟩ = 0
    # Step 2: v̄ = 0.25·0.05 + 0.75·0.2 = 0.1625, ∇f(v̄) = −1.675
    #   w = 0.2 − 0.1·2(0.2 − 1) = 0.36
    #   v = 0.05 − 0.1·0.25·(−1.675) = 0.091875
    #   α = 0.25 − 0.1·(−1.675)(0.05 − 0.2) = 0.25 − 0.025125 = 0.224875
    algorithm = _apfl(alpha=0.25, adaptive=True)

    # Execute
    result = federate(algorithm, line_ctx, clients([(1, 1)]), {"w": [0.0]}, trainer=trainer,
                      local_epochs=2)

    # Assert
    assert torch.allclose(result.state["model"]["w"], torch.tensor([[0.36]]))
    assert torch.allclose(result.state["personal"]["w"], torch.tensor([[0.091875]]))
    assert torch.allclose(result.state["alpha"]["value"], torch.tensor([0.224875]))
    (row,) = [r for r in result.rows if r["split"] == "train"]   # the diagnostic: α
    assert row["diag.alpha"] == pytest.approx(0.224875)
    # 2 steps on the one sample, 3 passes each: f(w), f(v̄) and adaptive α's ∇f(v̄)
    assert (row["steps"], row["samples"]) == (2, 6)
    mixed = 0.224875 * 0.091875 + (1 - 0.224875) * 0.36
    assert torch.allclose(result.last["val_loss"], torch.tensor([(mixed - 1) ** 2]))


@pytest.mark.parametrize("adaptive", [False, True])
def test_apfl_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                             differences, adaptive):
    _, s, _ = digits_ds3
    algorithm = Apfl(ApflParams(name="apfl", adaptive=adaptive), head=s.head, lr=0.05,
                     local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
