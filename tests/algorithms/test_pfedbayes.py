"""pFedBayes: the personal and global gradients of one local step by hand, the server's β-mixing of
means and spreads, batched == sequential with sampling.

Hand computations use the one-weight model ŷ = w·x with loss (w·x − y)²; engine noise is an
input: the one draw of a step is ε = normal(key, (1,), salt=0).
"""

import pytest
import torch

from pflpipe.algorithms import bayesian
from pflpipe.algorithms.algorithm import Round
from pflpipe.algorithms.pfedbayes import PFedBayes
from pflpipe.engine.noise import normal
from pflpipe.spec.algorithms import PFedBayesParams


def _pfedbayes(lr=0.1, head=frozenset(), **params):
    return PFedBayes(PFedBayesParams(name="pfedbayes", **params), head=head, lr=lr,
                     local_epochs=1)


def test_pfedbayes_step_gradients_reach_the_personal_and_the_global_distribution(line_ctx):
    # Prepare: q_θ = N(1, 0.5²), the copy of q_v = N(0, 1); n = 2 samples (x 1, y 1); ζ = 2,
    # K = 1; the loss is the negative ELBO over n.
    #   draw w₁ = 1 + 0.5ε; mean loss f = (w₁ − 1)² = (0.5ε)²
    #   KL(q_θ ‖ q_v) = log(1/0.5) + (0.25 + 1)/2 − ½ = 0.818147, counted for each side:
    #   loss = f + (ζ/n)·2·KL = f + 1.636294
    #   ∂μ_θ = 2(w₁ − 1) + (ζ/n)(μ_θ − μ_v)/σ_v² = ε + 1      ∂μ_v = (ζ/n)(μ_v − μ_θ)/σ_v² = −1
    #   ∂π_θ = [2(w₁ − 1)·ε + (ζ/n)(−1/σ_θ + σ_θ/σ_v²)]·sigmoid(π_θ) = (ε² − 1.5)·0.393469
    #   ∂π_v = (ζ/n)[1/σ_v − (σ_θ² + (μ_θ − μ_v)²)/σ_v³]·sigmoid(π_v) = (1 − 1.25)·0.632121
    algorithm = _pfedbayes(zeta=2.0)
    key = torch.tensor(7)
    eps = normal(key, (1,)).item()
    leaves = {"personal": torch.tensor([1.0]),
              "personal_spread": torch.tensor([bayesian.spread_of(0.5)]),
              "model": torch.tensor([0.0]), "spread": torch.tensor([bayesian.spread_of(1.0)])}
    state = {group: {"w": value.requires_grad_()} for group, value in leaves.items()}
    batch = {"x": torch.tensor([[1.0], [1.0]]), "y": torch.tensor([1.0, 1.0]),
             "mask": torch.ones(2), "key": key}

    # Execute
    loss = algorithm.local_objective(state, batch, {}, {}, line_ctx)
    grads = dict(zip(leaves, torch.autograd.grad(loss, [state[g]["w"] for g in leaves]),
                     strict=True))

    # Assert
    assert loss.item() == pytest.approx((0.5 * eps) ** 2 + 1.636294, abs=1e-5)
    assert grads["personal"].item() == pytest.approx(eps + 1, abs=1e-5)
    assert grads["model"].item() == pytest.approx(-1.0, abs=1e-5)
    assert grads["personal_spread"].item() == pytest.approx((eps ** 2 - 1.5) * 0.393469,
                                                            abs=1e-5)
    assert grads["spread"].item() == pytest.approx(-0.158030, abs=1e-5)


def test_pfedbayes_server_mixes_means_and_spreads_with_the_uniform_mean_by_beta():
    # Prepare: global mean 1, spread 0.2; clients' copies 2 and 4 (spreads 0.4, 0.8) with 1 and 3
    # samples — the paper averages uniformly, so the counts do not matter.
    states = {"model": {"w": torch.tensor([[2.0], [4.0]])},
              "spread": {"w": torch.tensor([[0.4], [0.8]])}}
    round = Round(1, torch.arange(2), torch.tensor([1, 3]), 2, {"w": torch.tensor([1.0])},
                  {"spread": {"w": torch.tensor([0.2])}}, states)

    # Execute
    new, server = _pfedbayes(beta=0.5).server_step(round)

    # Assert: ½·1 + ½·3 = 2; ½·0.2 + ½·0.6 = 0.4
    assert new["w"].item() == pytest.approx(2.0)
    assert server["spread"]["w"].item() == pytest.approx(0.4)


def test_pfedbayes_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                  differences):
    # Local SGD (optimizer: federation), so that the comparison is of the batching alone: with
    # Adam the objective amplifies rounding itself. Its KL gradients on the spreads cancel to
    # near 0 (q_θ starts equal to q_v), where Adam's step lr·g/(|g| + ε) turns a difference of
    # 1e-12 in g into one of 1e-7 in the weight; over 6 steps a one-ulp change of the initial
    # model (× (1 + 1.2e-7)) moves the sequential run by 4e-3 (SGD: 6e-8), and the batched
    # run's other summation order by up to 9e-4 on some CPUs. Adam's batched step is compared
    # on its first step below, and step for step with torch.optim.Adam in tests/engine.
    _, s, _ = digits_ds3
    algorithm = PFedBayes(PFedBayesParams(name="pfedbayes", mc_samples=2, predict="mc",
                                          optimizer="federation"),
                          head=s.head, lr=0.005, local_epochs=2)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
    assert torch.equal(batched.last["test_accuracy"], sequential.last["test_accuracy"])
    assert set(batched.server) == {"spread"}


def test_pfedbayes_adam_step_batched_equals_sequential_on_ds3(digits_ds3, on_both_trainers,
                                                              differences):
    # One local step of the paper's Adam, personal and global learning rates apart (measured:
    # 2.4e-7 at most, on the spreads).
    _, s, _ = digits_ds3
    algorithm = PFedBayes(PFedBayesParams(name="pfedbayes", mc_samples=2, predict="mc",
                                          global_lr=0.002),
                          head=s.head, lr=0.005, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm, rounds=1)

    assert differences(batched, sequential) == {}
    assert set(batched.server) == {"spread"}


PFEDBAYES_DS2 = """\
experiment: {name: pfedbayes-ds2}
dataset: {name: digits}
partition: {strategy: ds2, n_clients: 40, alpha: 0.5}
federation: {rounds: 1, lr: 0.3, local_epochs: 5}
personalization:
  - {name: pfedbayes, warm_start: none, local_epochs: 5}
tracking: {enabled: false}
"""


def test_pfedbayes_defaults_train_the_40_client_ds2_digits_case_without_diverging(tmp_path):
    # Prepare: issue 27's case (digits, ds2 α = 0.5, 40 clients, federation lr 0.3), one round
    # of 5 full-batch steps from the seeded model. Before the paper's Adam and learning rates
    # (1e-3) were the defaults, SGD at lr 0.3 diverged at once: client 33 has a handful of
    # samples, so the KL's curvature ζ/(n·σ²) is ~10⁴ and every step multiplies the gap.
    from pflpipe.spec import parse_spec
    from pflpipe.stages import partition_data, personalize

    spec = parse_spec(PFEDBAYES_DS2 + f"storage: {{kind: local, path: {tmp_path / 'store'}}}\n")
    partition_data.run(spec, 0, tmp_path / "partition")

    # Execute
    result = personalize.run(spec, 0, "pfedbayes", tmp_path / "partition", None, tmp_path / "out")

    # Assert: it trains, and every saved personal spread gives a σ within the bounds
    assert result.rounds == 1
    assert 0.1 < result.last_round_test_accuracy <= 1.0
    model = torch.load(tmp_path / "out" / "models" / "client_0033.pt", weights_only=True)
    sigma = torch.cat([torch.nn.functional.softplus(v).flatten() for k, v in model.items()
                       if k.startswith("spread/")])
    assert torch.isfinite(sigma).all() and sigma.max() < 10.0


def test_pfedbayes_with_sgd_at_lr_0_3_diverges_on_the_40_client_ds2_digits_case(tmp_path):
    # Prepare: the same case with the federation's plain SGD at lr 0.3 (`optimizer: federation`):
    # client 33's handful of samples make the KL's curvature ζ/(n·σ²) ~10⁴, so each step
    # multiplies the personal–global gap. The losses stay finite (~10⁶): the blow-up rule stops
    # the run (`pflpipe.engine.blowup`).
    from pflpipe.errors import DivergenceError
    from pflpipe.spec import parse_spec
    from pflpipe.stages import partition_data, personalize

    spec = parse_spec(PFEDBAYES_DS2.replace("warm_start: none, local_epochs: 5}",
                                            "warm_start: none, local_epochs: 5, "
                                            "optimizer: federation, lr: 0.3}")
                      + f"storage: {{kind: local, path: {tmp_path / 'store'}}}\n")
    partition_data.run(spec, 0, tmp_path / "partition")

    # Execute
    with pytest.raises(DivergenceError) as info:
        personalize.run(spec, 0, "pfedbayes", tmp_path / "partition", None, tmp_path / "out")

    # Assert: named by entry, client and round
    assert (info.value.client, info.value.round_idx) == (33, 1)
    assert str(info.value).startswith("entry 'pfedbayes', client 33, round 1: the personalized "
                                      "model's mean val loss rose to ")
