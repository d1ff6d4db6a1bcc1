"""pFedVEM: the ELBO and KL of a 2-weight head, the confidence τ_j, the τ-weighted global head,
the lagged M-step over rounds, MC prediction, batched == sequential with sampling.

The tiny model is ŷ = h·(b·x) + c: a one-weight base b (`base.w`) and a Gaussian head of d = 2
weights, h (`head.weight`) and c (`head.bias`). Engine noise is an input of the hand computations:
draw k of the head is ε_k = normal(key, (2,), salt=k), its entries in sorted key order
(ε_k[0] for head.bias, ε_k[1] for head.weight).
"""

import math

import pytest
import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from pflpipe.algorithms import bayesian
from pflpipe.algorithms.algorithm import Round
from pflpipe.algorithms.pfedvem import PFedVem
from pflpipe.engine.noise import normal
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer
from pflpipe.errors import SpecError
from pflpipe.spec import parse_spec
from pflpipe.spec.algorithms import PFedVemParams

HEAD = frozenset({"head.weight", "head.bias"})


class Affine(nn.Module):
    """ŷ = head(b·x): base `base.w`, head nn.Linear(1, n_outputs) (d = 2 for one output)."""

    def __init__(self, n_outputs=1):
        super().__init__()
        self.base = nn.Module()
        self.base.w = nn.Parameter(torch.ones(1))
        self.head = nn.Linear(1, n_outputs)

    def forward(self, x):
        return self.head(x * self.base.w)


def _pfedvem(lr=0.1, head=HEAD, **params):
    return PFedVem(PFedVemParams(name="pfedvem", **params), head=head, lr=lr, local_epochs=1)


def _spread(*stds):
    return torch.tensor([bayesian.spread_of(s) for s in stds])


def _head(weight, bias):
    return {"head.weight": torch.tensor([[weight]]), "head.bias": torch.tensor([bias])}


def test_pfedvem_kl_of_a_two_weight_head_matches_the_closed_form_by_hand():
    # Prepare: μ = (h 0.5, c −1), σ = (0.5, 0.25), prior N(w = 0, ρ² = 1/τ = ½).
    #   KL_i = log(ρ/σ_i) + (σ_i² + (μ_i − w_i)²)/(2ρ²) − ½
    #   h: log(0.70711/0.5) + (0.25 + 0.25)·1 − ½ = 0.346574
    #   c: log(0.70711/0.25) + (0.0625 + 1)·1 − ½ = 1.602221      sum 1.948794
    mean = {k: v.requires_grad_() for k, v in _head(0.5, -1.0).items()}
    std = {"head.weight": torch.tensor([[0.5]]), "head.bias": torch.tensor([0.25])}
    tau = torch.tensor(2.0)

    # Execute
    kl = bayesian.gaussian_kl(mean, std, _head(0.0, 0.0), tau.rsqrt())
    grads = torch.autograd.grad(kl, [mean["head.weight"], mean["head.bias"]])

    # Assert: the value, torch's own KL, and ∂KL/∂μ = τ(μ − w) = (1, −2)
    assert kl.item() == pytest.approx(1.948794, abs=1e-6)
    reference = sum(kl_divergence(Normal(mean[k], std[k]), Normal(0.0, math.sqrt(0.5))).sum()
                    for k in mean)
    assert kl.item() == pytest.approx(reference.item(), abs=1e-6)
    assert [g.item() for g in grads] == pytest.approx([1.0, -2.0])


def test_pfedvem_elbo_of_a_two_weight_head_is_the_mc_sum_loss_plus_the_kl():
    # Prepare: b = 2; two samples (x 1, y 1), (x −1, y 0); K = 2; the head and prior as above.
    # Draw k: h_k = 0.5 + 0.5·ε_k[1], c_k = −1 + 0.25·ε_k[0];
    #   −ELBO = ½ Σ_k Σ_i (h_k·2·x_i + c_k − y_i)² + KL
    algorithm = _pfedvem(mc_samples=2)
    ctx = Context(Affine(), "regression")
    key = torch.tensor(7)
    state = {"model": {"base.w": torch.tensor([2.0])}, "mean": _head(0.5, -1.0),
             "spread": {"head.weight": _spread(0.5).view(1, 1), "head.bias": _spread(0.25)},
             "tau": {"value": torch.tensor(2.0)}}
    batch = {"x": torch.tensor([[1.0], [-1.0]]), "y": torch.tensor([1.0, 0.0]),
             "mask": torch.ones(2), "key": key}
    nll = 0.0
    for k in range(2):
        eps = normal(key, (2,), salt=k).tolist()
        h, c = 0.5 + 0.5 * eps[1], -1.0 + 0.25 * eps[0]
        nll += ((2 * h + c - 1) ** 2 + (-2 * h + c - 0) ** 2) / 2

    # Execute
    loss = algorithm.elbo_objective(state, batch, {"global": {**_head(0.0, 0.0)}}, {}, ctx)

    # Assert
    assert loss.item() == pytest.approx(nll + 1.948794, abs=1e-5)


def test_pfedvem_confidence_by_hand_and_its_ablations():
    # Prepare: μ = (0.5, −1), σ = (1, 0.5), w = (0.5, 0): tr Σ = 1 + 0.25 = 1.25,
    #   ‖μ − w‖² = 0 + 1 = 1, d = 2.
    mean = _head(0.5, -1.0)
    spread = {"head.weight": _spread(1.0).view(1, 1), "head.bias": _spread(0.5)}
    w = _head(0.5, 0.0)

    # Execute
    full, uncertainty, deviation = (
        _pfedvem(confidence=mode).confidence(mean, spread, w).item()
        for mode in ("full", "uncertainty", "deviation"))
    at_prior = _pfedvem(confidence="deviation").confidence(mean, spread, mean).item()

    # Assert: 2/2.25, 2/1.25, 2/1; with μ = w the deviation variant falls back to 2/1.25
    assert full == pytest.approx(2 / 2.25)
    assert uncertainty == pytest.approx(1.6)
    assert deviation == pytest.approx(2.0)
    assert at_prior == pytest.approx(1.6)


def _round(seed=0, clients=3, n_clients=3):
    # clients' bases 1, 2, 4 with 1, 1, 2 samples; head means 0, 3, 6 (both weights); τ 1, 2, 1
    means = torch.tensor([0.0, 3.0, 6.0])
    states = {"model": {"base.w": torch.tensor([[1.0], [2.0], [4.0]])},
              "mean": {"head.weight": means.view(3, 1, 1), "head.bias": means.view(3, 1)},
              "tau": {"value": torch.tensor([1.0, 2.0, 1.0])}}
    return Round(1, torch.arange(clients), torch.tensor([1, 1, 2]), n_clients,
                 {"base.w": torch.zeros(1), **_head(0.0, 0.0)}, {}, states, seed)


def test_pfedvem_server_weights_the_head_by_tau_and_the_base_by_counts():
    # Prepare: every client arrives (only a sampled share trained: 3 of 30)
    algorithm = _pfedvem(client_fraction=0.1)

    # Execute
    new, _ = algorithm.server_step(_round(n_clients=30))

    # Assert: θ = (1·1 + 1·2 + 2·4)/4 = 2.75; w = (1·0 + 2·3 + 1·6)/4 = 3
    assert new["base.w"].item() == pytest.approx(2.75)
    assert new["head.weight"].item() == pytest.approx(3.0)
    assert new["head.bias"].item() == pytest.approx(3.0)


def test_pfedvem_server_aggregates_only_the_clients_whose_update_arrives():
    # Prepare: every client trained; each arrives with probability ½; seed 8 draws [T, F, T]
    algorithm = _pfedvem(participation=0.5)
    round = _round(seed=8)

    # Execute
    arrived = algorithm.arrivals(round)
    new, _ = algorithm.server_step(round)

    # Assert: θ = (1·1 + 2·4)/3 = 3; w = (1·0 + 1·6)/2 = 3 — client 1 (τ 2) is left out
    assert arrived.tolist() == [True, False, True]
    assert new["base.w"].item() == pytest.approx(3.0)
    assert new["head.weight"].item() == pytest.approx(3.0)


def test_pfedvem_arrivals_are_seeded_redrawn_until_enough_and_near_the_probability():
    algorithm = _pfedvem(participation=0.3, min_participants=1)

    masks = torch.stack([algorithm.arrivals(_round(seed)) for seed in range(400)])

    assert torch.equal(masks[7], algorithm.arrivals(_round(7)))
    assert bool((masks.sum(1) >= 1).all())
    # P(arrive | at least one of 3 arrives) = 0.3 / (1 − 0.7³) = 0.4566
    assert masks.float().mean().item() == pytest.approx(0.4566, abs=0.04)
    with pytest.raises(ValueError, match="min_participants = 4 exceeds the 3 clients"):
        _pfedvem(min_participants=4).arrivals(_round())


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_pfedvem_rounds_use_the_lagged_confidence_and_the_weighted_head(clients, federate,
                                                                        trainer):
    # Prepare: two clients, every update arrives; the initial posterior σ₀² = 0.25.
    # Round 1: μ = w, so τ_j = d / tr Σ = 2 / (2·0.25) = 4 for both and w¹ is the plain mean.
    # Round 2: τ_j = 2 / (tr Σ_j¹ + ‖μ_j¹ − w¹‖²) from round 1's posterior and global head, and
    #   w² = Σ τ_j μ_j² / Σ τ_j.
    algorithm = _pfedvem(participation=1.0, init_var=0.25, head_lr=0.05, mc_samples=2)
    ctx = Context(Affine(), "regression")
    data = clients([(1, 1), (2, 1)], [(1, -1)])
    init = {"base.w": [1.0], "head.weight": [[0.5]], "head.bias": [0.0]}

    # Execute
    one = federate(algorithm, ctx, data, init, trainer=trainer, rounds=1)
    two = federate(algorithm, ctx, data, init, trainer=trainer, rounds=2)

    # Assert
    assert torch.allclose(one.state["tau"]["value"], torch.tensor([4.0, 4.0]))
    for key in HEAD:
        assert torch.allclose(one.global_params[key], one.state["mean"][key].mean(0))
    sigma2 = {k: torch.nn.functional.softplus(v) ** 2 for k, v in one.state["spread"].items()}
    lagged = torch.stack([2 / sum(sigma2[k][j].sum() + ((one.state["mean"][k][j]
                                                          - one.global_params[k]) ** 2).sum()
                                  for k in HEAD) for j in range(2)])
    assert torch.allclose(two.state["tau"]["value"], lagged)
    recorded = {(r["round"], r["client"]): r["diag.tau"] for r in two.rows
                if r["split"] == "train"}   # the diagnostic: τ_j of each client and round
    assert [recorded[1, j] for j in range(2)] == pytest.approx([4.0, 4.0])
    assert [recorded[2, j] for j in range(2)] == pytest.approx(lagged.tolist())
    weights = lagged / lagged.sum()
    for key in HEAD:
        expected = torch.tensordot(weights, two.state["mean"][key], dims=1)
        assert torch.allclose(two.global_params[key], expected)
    counts = torch.tensor([2.0, 1.0])
    assert torch.allclose(two.global_params["base.w"],
                          (counts @ two.state["model"]["base.w"]) / 3)


def test_pfedvem_mc_prediction_with_a_fixed_key_is_the_mean_of_sampled_softmaxes():
    # Prepare: two classes; b = 1, head weight (1, −1), bias (0, 0.5), σ = 0.5 everywhere; K = 3.
    # Draw k: ε_k = normal(key, (4,), salt=k) — bias gets ε_k[0:2], weight ε_k[2:4].
    algorithm = _pfedvem(predict="mc", mc_samples=3)
    ctx = Context(Affine(n_outputs=2))
    mean = {"base.w": torch.tensor([1.0]), "head.weight": torch.tensor([[1.0], [-1.0]]),
            "head.bias": torch.tensor([0.0, 0.5])}
    spread = {k: torch.full_like(mean[k], bayesian.spread_of(0.5)) for k in HEAD}
    model = {"model": mean, "spread": spread}
    x, key = torch.tensor([[2.0]]), torch.tensor(11)
    probabilities = torch.zeros(2)
    for k in range(3):
        eps = normal(key, (4,), salt=k)
        weight = torch.tensor([1.0, -1.0]) + 0.5 * eps[2:]
        bias = torch.tensor([0.0, 0.5]) + 0.5 * eps[:2]
        probabilities += torch.softmax(weight * 2.0 + bias, 0) / 3

    # Execute
    output = algorithm.predict(model, x, ctx, key)
    again = algorithm.predict(model, x, ctx, key)
    other = algorithm.predict(model, x, ctx, torch.tensor(12))
    at_mean = _pfedvem(predict="mean").predict(model, x, ctx, key)

    # Assert
    assert torch.allclose(output[0], probabilities.log(), atol=1e-6)
    assert torch.equal(output, again)
    assert not torch.equal(output, other)
    assert torch.allclose(at_mean[0], torch.tensor([2.0, -1.5]))


def test_pfedvem_scored_model_uses_the_local_or_the_global_base_with_the_posterior_mean():
    state = {"model": {"base.w": torch.tensor([3.0])}, "mean": _head(0.5, -1.0),
             "spread": {"head.weight": torch.zeros(1, 1), "head.bias": torch.zeros(1)}}
    shared = {"global": {"base.w": torch.tensor([9.0]), **_head(7.0, 7.0)}}

    local = _pfedvem().scored(state, shared)
    global_base = _pfedvem(pm_base="global").scored(state, shared)

    assert local["model"] == {"base.w": torch.tensor([3.0]), **_head(0.5, -1.0)}
    assert global_base["model"]["base.w"] == torch.tensor([9.0])
    assert set(local) == {"model", "spread"}


def test_pfedvem_needs_a_head_and_trains_every_client_unless_told_otherwise():
    text = ("experiment: {name: x}\ndataset: {name: digits}\n"
            "partition: {strategy: ds1, n_clients: 4}\n"
            "federation: {client_fraction: 0.5}\n"
            "personalization:\n  - {name: pfedvem}\n"
            "  - {name: pfedvem, label: cheap, client_fraction: 0.1}\n")
    spec = parse_spec(text)
    every, sampled = spec.personalization

    assert every.rounds_of(spec.federation).client_fraction == 1.0
    assert sampled.rounds_of(spec.federation).client_fraction == 0.1
    with pytest.raises(SpecError, match="train_all_clients was replaced by client_fraction"):
        parse_spec(text.replace("client_fraction: 0.1", "train_all_clients: false"))
    with pytest.raises(ValueError, match="pfedvem needs a model head"):
        _pfedvem(head=frozenset()).init_kept({"w": torch.zeros(1)})


def test_pfedvem_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                differences):
    # sampled heads in both phases, seeded arrivals, the MC predictive scored
    _, s, _ = digits_ds3
    algorithm = PFedVem(PFedVemParams(name="pfedvem", mc_samples=2, head_steps=3, predict="mc",
                                      participation=0.5),
                        head=s.head, lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
    assert torch.equal(batched.last["test_accuracy"], sequential.last["test_accuracy"])
