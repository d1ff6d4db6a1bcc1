"""Per-FedAvg: the FO and HF meta-gradients, and scoring the model adapted from the global one."""

import pytest
import torch

from pflpipe.algorithms.per_fedavg import PerFedAvg
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import PerFedAvgParams


def _per_fedavg(**params):
    return PerFedAvg(PerFedAvgParams(name="per_fedavg", **params), head=frozenset(), lr=0.05,
                     local_epochs=1)


def _draws(*samples):
    """A step's mini-batches [draws, 1, ...]: one sample (x, y) per draw."""
    return {"x": torch.tensor([[[float(x)]] for x, _ in samples]),
            "y": torch.tensor([[float(y)] for _, y in samples]),
            "mask": torch.ones(len(samples), 1)}


# Every case: w = 0, α = 0.1, f(w; (x, y)) = (w·x − y)², ∇f = 2x(w·x − y), ∇²f = 2x².
#   D  = (1, 1): ∇f(0; D) = −2, so w̃ = 0 − 0.1·(−2) = 0.2
#   D′ = (2, 0): d = ∇f(w̃; D′) = 2·2·(0.4 − 0) = 1.6


def test_per_fedavg_first_order_meta_gradient_is_the_gradient_at_the_adapted_point(line_ctx):
    algorithm = _per_fedavg(alpha=0.1)
    w = torch.zeros(1, requires_grad=True)

    loss = algorithm.local_objective({"model": {"w": w}}, _draws((1, 1), (2, 0)), {}, {},
                                     line_ctx)
    (grad,) = torch.autograd.grad(loss, w)

    # FO: d = 1.6; the loss is f(w̃; D′) = 0.4² = 0.16
    assert torch.allclose(grad, torch.tensor([1.6]))
    assert torch.allclose(loss, torch.tensor(0.16))


def test_per_fedavg_hessian_free_meta_gradient_corrects_by_the_hessian_vector_product(line_ctx):
    # D″ = (1, 3): Hessian 2·1² = 2; central differences are exact on a quadratic, whatever δ:
    #   d − α·H·d = 1.6 − 0.1·2·1.6 = 1.28, the exact MAML gradient (1 − α∇²f(w; D))·d
    #   since D and D″ have the same Hessian.
    algorithm = _per_fedavg(alpha=0.1, variant="hessian_free", delta=0.5)
    w = torch.zeros(1, requires_grad=True)

    loss = algorithm.local_objective({"model": {"w": w}}, _draws((1, 1), (2, 0), (1, 3)), {}, {},
                                     line_ctx)
    (grad,) = torch.autograd.grad(loss, w)

    assert torch.allclose(grad, torch.tensor([1.28]))


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_per_fedavg_scores_the_model_adapted_from_the_global_one(line_ctx, clients, federate,
                                                                  trainer):
    # Prepare: one client, one sample (1, 1), batch 1, α 0.1, β 0.5, FO. The round is one
    # meta-step drawing the sample twice: w̃ = 0.2, ∇f(w̃) = 2(0.2 − 1) = −1.6,
    #   w = 0 − 0.5·(−1.6) = 0.8 (also the global model).
    # Scoring adapts one step of α from the global model: ∇f(0.8) = −0.4 -> 0.84,
    #   val loss (0.84 − 1)² = 0.0256 (the global model itself would score 0.04).
    algorithm = _per_fedavg(alpha=0.1, beta=0.5)

    # Execute
    result = federate(algorithm, line_ctx, clients([(1, 1)]), {"w": [0.0]}, trainer=trainer,
                      batch_size=1)

    # Assert
    assert torch.allclose(result.global_params["w"], torch.tensor([0.8]))
    assert torch.allclose(result.last["val_loss"], torch.tensor([0.0256]))
    assert torch.allclose(result.best_params["w"], torch.tensor([[0.84]]))


@pytest.mark.parametrize("variant", ["first_order", "hessian_free"])
def test_per_fedavg_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                   differences, variant):
    _, s, _ = digits_ds3
    algorithm = PerFedAvg(PerFedAvgParams(name="per_fedavg", variant=variant), head=s.head,
                          lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    # HF's central difference (plus − minus) / 2δ, times α, multiplies a rounding difference of
    # the two gradients by α / 2δ = 25 (δ 1e-3): the batched and the sequential trainer sum in
    # another order (with 1 torch thread they end 1.7e-4 apart), so HF is held to 25 × 1e-5.
    amplified = 1 + (algorithm.params.alpha or algorithm.lr) / (2 * algorithm.params.delta)
    atol = 1e-5 * (amplified if variant == "hessian_free" else 1)
    assert differences(batched, sequential, atol=atol) == {}


def test_per_fedavg_alpha_and_beta_default_to_the_entrys_lr():
    algorithm = PerFedAvg(PerFedAvgParams(name="per_fedavg"), head=frozenset(), lr=0.07,
                          local_epochs=1)

    (train,), (adapt,) = algorithm.phases(), algorithm.eval_phases()

    assert (train.lr, adapt.lr) == (0.07, 0.07)
