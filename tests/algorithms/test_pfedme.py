"""pFedMe: K inner steps towards θ̃, the envelope step on w, the β mixing at the server."""

import pytest
import torch

from pflpipe.algorithms.pfedme import PFedMe
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import PFedMeParams


def _pfedme(lr=0.2, **params):
    return PFedMe(PFedMeParams(name="pfedme", **params), head=frozenset(), lr=lr, local_epochs=1)


def _batch(*samples):
    return {"x": torch.tensor([[float(x)] for x, _ in samples]),
            "y": torch.tensor([float(y) for _, y in samples]), "mask": torch.ones(len(samples))}


def test_pfedme_inner_problem_takes_k_steps_and_w_gets_the_envelope_gradient(line_ctx):
    # Prepare: one sample (x 1, y 1), w = θ = 0, λ = 1, personal lr ¼, K = 2.
    # Inner objective (θ − 1)² + ½(θ − w)², gradient 2(θ − 1) + (θ − 0) = 3θ − 2:
    #   θ1 = 0 − ¼·(−2) = 0.5;  θ2 = 0.5 − ¼·(1.5 − 2) = 0.625   (exact minimiser: 2/3)
    # w's loss λ/2 (w − θ̃)² = ½·0.625² = 0.1953125, gradient λ(w − θ̃) = −0.625.
    algorithm = _pfedme(lam=1.0, personal_lr=0.25, inner_steps=2)
    w = torch.zeros(1, requires_grad=True)
    state = {"model": {"w": w}, "personal": {"w": torch.zeros(1)}}

    # Execute
    loss, updates = algorithm.local_objective(state, _batch((1, 1)), {}, {}, line_ctx)
    (grad,) = torch.autograd.grad(loss, w)

    # Assert
    assert torch.allclose(updates["personal"]["w"], torch.tensor([0.625]))
    assert torch.allclose(loss, torch.tensor(0.1953125))
    assert torch.allclose(grad, torch.tensor([-0.625]))


def test_pfedme_aggregate_mixes_the_old_global_and_the_weighted_mean_by_beta():
    # Prepare: old global 1; payloads 2 and 4 weighted ¼ and ¾ -> mean 3.5
    algorithm = _pfedme(beta=2.0)

    # Execute
    new = algorithm.aggregate({"w": torch.tensor([1.0])}, {"w": torch.tensor([[2.0], [4.0]])},
                              torch.tensor([0.25, 0.75]))

    # Assert: (1 − β)·1 + β·3.5 = −1 + 7
    assert torch.allclose(new["w"], torch.tensor([6.0]))


def _reference_client(w, samples, lam, personal_lr, inner_steps, lr, steps):
    """The paper's client loop in plain floats: θ restarts at the received w and is warm-started
    from the previous θ̃ on every later step.
    """
    theta = w
    for _ in range(steps):
        for _ in range(inner_steps):
            grad = sum(2 * x * (theta * x - y) for x, y in samples) / len(samples)
            theta -= personal_lr * (grad + lam * (theta - w))
        w -= lr * lam * (w - theta)
    return w, theta


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_pfedme_round_matches_the_papers_client_and_server_updates(line_ctx, clients, federate,
                                                                     trainer):
    # Prepare: two clients (1 and 2 samples), 2 local steps (epochs of one full batch), β ½.
    samples = [[(1, 1)], [(1, -1), (2, 0)]]
    params = {"lam": 2.0, "personal_lr": 0.1, "inner_steps": 3, "beta": 0.5}
    algorithm = _pfedme(lr=0.2, **params)
    expected = [_reference_client(0.5, s, 2.0, 0.1, 3, 0.2, steps=2) for s in samples]
    mean = (1 * expected[0][0] + 2 * expected[1][0]) / 3
    expected_global = (1 - 0.5) * 0.5 + 0.5 * mean

    # Execute
    result = federate(algorithm, line_ctx, clients(*samples), {"w": [0.5]}, trainer=trainer,
                      local_epochs=2)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(),
                          torch.tensor([e[0] for e in expected]), atol=1e-6)
    assert torch.allclose(result.state["personal"]["w"].flatten(),
                          torch.tensor([e[1] for e in expected]), atol=1e-6)
    assert torch.allclose(result.global_params["w"], torch.tensor([expected_global]), atol=1e-6)
    rows = sorted((r for r in result.rows if r["split"] == "train"), key=lambda r: r["client"])
    # the diagnostic ‖θ̃ − w‖ against the round's starting global w = 0.5
    assert [r["diag.personal_distance"] for r in rows] == pytest.approx(
        [abs(e[1] - 0.5) for e in expected], abs=1e-6)
    # two full-batch steps, each K = 3 inner passes over the batch: 2·3·1 and 2·3·2 samples
    assert [(r["steps"], r["samples"]) for r in rows] == [(2, 6), (2, 12)]


def test_pfedme_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                               differences):
    _, s, _ = digits_ds3
    algorithm = PFedMe(PFedMeParams(name="pfedme"), head=s.head, lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
