"""Self-FL and ActPerFL: leave-one-out start, ℓ_m, precision weights, variances, smoothing.

The three-client case (oracle variances σ₀² = 0.1, σ² = 0.4, sizes 1, 2, 4) worked by hand:
  σ_m² = σ²/N_m = 0.4, 0.2, 0.1;  w_m = 1/(σ₀² + σ_m²) = 2, 10/3, 5;  W = 31/3;
  S_{−m} = W − w_m = 25/3, 7, 16/3;  c_m = w_m / S_{−m} = 6/25, 10/21, 15/16;
  ρ_m = S_{−m} / (1/σ_m² + S_{−m}) = (25/3)/(65/6), 7/12, (16/3)/(46/3) = 10/13, 7/12, 8/23.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from pflpipe.algorithms.actperfl import ActPerFL
from pflpipe.algorithms.algorithm import Phase, Round
from pflpipe.algorithms.self_fl import SelfFL
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.spec.algorithms import ActPerFLParams, SelfFLParams

ORACLE = {"sigma0_sq": 0.1, "sigma_sq": 0.4}


def _algorithm(cls=SelfFL, lr=0.02, **params):
    name = "actperfl" if cls is ActPerFL else "self_fl"
    model = ActPerFLParams if cls is ActPerFL else SelfFLParams
    return cls(model(name=name, **params), head=frozenset(), lr=lr, local_epochs=1)


def _round(algorithm, model, counts=(1, 2, 4), seen=(1, 1, 1), n_clients=3, global_w=1.0,
           stats=None):
    """A round of clients 0..C−1 holding one-weight models `model`, seen `seen` times."""
    w = torch.tensor([float(v) for v in model]).view(-1, 1)
    uncertainty = {"count": torch.tensor([float(s) for s in seen]), "var": torch.zeros(len(w)),
                   "reported": torch.zeros(len(w)), "mean.w": torch.zeros_like(w)}
    uncertainty.update(stats or {})
    global_params = {"w": torch.tensor([global_w])}
    return Round(index=2, clients=torch.arange(len(w)), counts=torch.tensor(counts),
                 n_clients=n_clients, global_params=global_params,
                 server=algorithm.init_server(global_params, n_clients),
                 states={"model": {"w": w}, "uncertainty": uncertainty})


def test_self_fl_starts_each_client_from_the_leave_one_out_global_model():
    # Prepare: global θ = 1, last personal models 2, 0, 3; client 2 has never trained.
    # start_m = θ − c_m (θ_m − θ): 1 − 0.24·1 = 0.76, 1 − (10/21)·(−1) = 1.476190, and client 2
    # starts from θ = 1 (its last model is the global model: no correction).
    algorithm = _algorithm(oracle=ORACLE)
    round = _round(algorithm, model=(2, 0, 3), seen=(1, 1, 0))

    # Execute
    start = algorithm.dispatch(round)

    # Assert
    assert start["w"].flatten().tolist() == pytest.approx([0.76, 1 + 10 / 21, 1.0], abs=1e-6)


def test_self_fl_leave_one_out_start_of_a_seen_third_client():
    # 1 − (15/16)·(3 − 1) = −0.875
    algorithm = _algorithm(oracle=ORACLE)

    start = algorithm.dispatch(_round(algorithm, model=(2, 0, 3)))

    assert start["w"].flatten().tolist() == pytest.approx([0.76, 1 + 10 / 21, -0.875], abs=1e-6)


@pytest.mark.parametrize(("lr", "cap", "expected"), [
    # a_m = η/σ_m² = 0.05, 0.1, 0.2; ℓ = ⌈ln ρ / ln(1 − a)⌉:
    # ⌈−0.262364/−0.051293⌉ = ⌈5.115⌉ = 6, ⌈−0.538997/−0.105361⌉ = ⌈5.116⌉ = 6,
    # ⌈−1.056053/−0.223144⌉ = ⌈4.733⌉ = 5
    (0.02, 40, [6, 6, 5]),
    (0.02, 5, [5, 5, 5]),          # capped by max_local_steps
    (0.5, 40, [1, 1, 1]),          # η ≥ σ_m²: one step already reaches the local optimum
])
def test_self_fl_local_steps_solve_eqn_8_on_the_summed_likelihood(lr, cap, expected):
    algorithm = _algorithm(oracle=ORACLE, lr=lr, max_local_steps=cap, loss_reduction="sum")
    round = _round(algorithm, model=(2, 0, 3))

    steps, lrs = algorithm.schedule(round, Phase(), torch.full((3,), 9), torch.full((3,), lr))

    assert steps.tolist() == expected
    assert lrs.tolist() == pytest.approx([lr] * 3)


def test_self_fl_local_steps_on_the_batch_mean_loss_contract_by_lr_over_n_sigma_sq():
    # The same clients stepping on the mean loss: a_m = η/(N_m σ_m²) = 0.02/(1·0.4) = 0.02/(2·0.2)
    # = 0.02/(4·0.1) = 0.05 for all three; ℓ = ⌈ln ρ / ln 0.95⌉ = ⌈−0.262364/−0.051293⌉ = 6,
    # ⌈−0.538997/−0.051293⌉ = ⌈10.508⌉ = 11, ⌈−1.056053/−0.051293⌉ = ⌈20.589⌉ = 21.
    algorithm = _algorithm(oracle=ORACLE, lr=0.02)
    round = _round(algorithm, model=(2, 0, 3))

    steps, _ = algorithm.schedule(round, Phase(), torch.full((3,), 9), torch.full((3,), 0.02))

    assert steps.tolist() == [6, 11, 21]


def test_self_fl_takes_more_than_one_step_at_digits_scale_variances():
    # Issue 27: on digits at lr 0.05, σ̂_m² ≈ 0.012 made η/σ̂_m² ≥ 1 and ℓ_m = 1 always. On the
    # batch-mean loss with N_m = 30, 60, 120: a_m = 0.05/(N_m·0.012) = 0.1389, 0.0694, 0.0347;
    # σ̂₀² = 0.04 so w = 1/0.052 for all, S_{−m} = 2/0.052 = 38.46, ρ = 38.46/(83.33 + 38.46)
    # = 0.31579; ℓ = ⌈1.15268/0.14953⌉ = ⌈7.709⌉ = 8, ⌈1.15268/0.07194⌉ = ⌈16.02⌉ = 17,
    # ⌈1.15268/0.03534⌉ = ⌈32.62⌉ = 33.
    algorithm = _algorithm(lr=0.05)
    round = _round(algorithm, model=(2, 0, 3), counts=(30, 60, 120), seen=(3, 3, 3),
                   stats={"var": torch.full((3,), 0.012)})
    round.server["uncertainty"]["sigma0_sq"] = torch.tensor(0.04)

    steps, _ = algorithm.schedule(round, Phase(), torch.full((3,), 9), torch.full((3,), 0.05))

    assert steps.tolist() == [8, 17, 33]


def test_self_fl_clients_without_history_start_from_the_global_model_with_fedavg_steps():
    # Estimated variances: client 0 has 2 recorded models (σ̂² = 0.4), client 1 one, client 2
    # none. Only client 0 follows Self-FL's rules; the others keep FedAvg's start and 9 steps.
    algorithm = _algorithm(lr=0.02)
    round = _round(algorithm, model=(2, 0, 3), seen=(2, 1, 0),
                   stats={"var": torch.tensor([0.4, 0.0, 0.0])})

    steps, _ = algorithm.schedule(round, Phase(), torch.full((3,), 9), torch.full((3,), 0.02))
    start = algorithm.dispatch(round)

    assert steps[1:].tolist() == [9, 9] and steps[0] != 9
    assert start["w"].flatten()[1:].tolist() == [1.0, 1.0]
    assert start["w"].flatten()[0] < 1.0


def test_self_fl_server_weights_are_precisions_with_the_round_spread_and_imputation():
    # Uploads 1, 2, 4: σ̂₀² = ((4/3)² + (1/3)² + (5/3)²)/3 = 14/9. Reported σ̂_m² 0.5, 1.0 and
    # unknown for client 2 (one earlier participation only), imputed by the known mean 0.75:
    # w = 1/(14/9 + 1/2) = 18/37, 1/(14/9 + 1) = 9/23, 1/(14/9 + 3/4) = 36/83.
    algorithm = _algorithm()
    round = _round(algorithm, model=(1, 2, 4), seen=(3, 3, 2),
                   stats={"reported": torch.tensor([0.5, 1.0, 0.7])})
    w = [Fraction(18, 37), Fraction(9, 23), Fraction(36, 83)]
    expected = sum(wi * x for wi, x in zip(w, (1, 2, 4), strict=True)) / sum(w)

    # Execute
    new, server = algorithm.server_step(round)

    # Assert
    assert new["w"].item() == pytest.approx(float(expected), abs=1e-6)
    assert server["uncertainty"]["sigma0_sq"].item() == pytest.approx(14 / 9)
    assert server["uncertainty"]["sigma_sq"].tolist() == pytest.approx([0.5, 1.0, 0.0])
    assert server["uncertainty"]["known"].tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(("cls", "kept_share"), [(SelfFL, 0.25), (ActPerFL, 0.0)])
def test_smoothing_moves_the_global_model_by_the_activity_rate(cls, kept_share):
    # 3 of 4 clients take part: Self-FL θ ← ¼·θ + ¾·θ̂ (θ = 0.5); ActPerFL θ ← θ̂.
    algorithm = _algorithm(cls)
    round = _round(algorithm, model=(1, 2, 4), seen=(3, 3, 2), n_clients=4, global_w=0.5,
                   stats={"reported": torch.tensor([0.5, 1.0, 0.7])})
    w = [Fraction(18, 37), Fraction(9, 23), Fraction(36, 83)]
    aggregate = float(sum(wi * x for wi, x in zip(w, (1, 2, 4), strict=True)) / sum(w))

    new, _ = algorithm.server_step(round)

    assert new["w"].item() == pytest.approx(kept_share * 0.5 + (1 - kept_share) * aggregate,
                                            abs=1e-6)


def test_self_fl_ablations_fall_back_to_fedavg_start_steps_and_weights():
    algorithm = _algorithm(oracle=ORACLE, init="global", steps="fixed", aggregation="sample_size")
    round = _round(algorithm, model=(1, 2, 4), counts=(1, 1, 2))

    steps, _ = algorithm.schedule(round, Phase(), torch.full((3,), 9), torch.full((3,), 0.02))
    new, _ = algorithm.server_step(round)

    assert algorithm.dispatch(round) is None
    assert steps.tolist() == [9, 9, 9]
    assert new["w"].item() == pytest.approx((1 + 2 + 2 * 4) / 4)


def test_self_fl_finish_adds_the_round_to_the_welford_variance():
    # History 1, 3 (count 2, mean 2, variance 1) plus 5: mean 3, variance of 1, 3, 5 = 8/3.
    algorithm = _algorithm()
    start = {"uncertainty": {"count": torch.tensor(2.0), "var": torch.tensor(1.0),
                             "reported": torch.tensor(0.0), "mean.w": torch.tensor([2.0])},
             "model": {"w": torch.tensor([0.0])}}
    trained = {**start, "model": {"w": torch.tensor([5.0])}}

    stats = algorithm.finish(start, trained, {})["uncertainty"]

    assert stats["count"].item() == 3.0
    assert stats["mean.w"].tolist() == [3.0]
    assert stats["var"].item() == pytest.approx(8 / 3)
    assert stats["reported"].item() == 1.0        # σ̂_m² before this round's training


def test_self_fl_online_variance_equals_the_population_trace_variance():
    # Eqn. 19 over random vectors equals (1/n) Σ ‖x_i − x̄‖² (App. E, Eqn. 18).
    algorithm = _algorithm()
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(7, 3, 2))
    stats = algorithm.init_kept({"a": torch.zeros(3, 2, dtype=torch.float64)})["uncertainty"]

    for x in xs:
        state = {"uncertainty": stats}
        stats = algorithm.finish(state, {"model": {"a": torch.from_numpy(x)}}, {})["uncertainty"]

    assert stats["var"].item() == pytest.approx(xs.var(axis=0).sum(), rel=1e-12)


@pytest.mark.parametrize(("cls", "params"), [(SelfFL, {}), (ActPerFL, {}),
                                             (SelfFL, {"augmented": True, "augmented_epochs": 1})])
def test_self_fl_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                 differences, cls, params):
    _, s, _ = digits_ds3
    algorithm = _algorithm(cls, lr=0.05, **params)
    algorithm.head = s.head

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
    assert batched.state["uncertainty"]["count"].tolist() == [3.0] * 10
    assert batched.server["uncertainty"]["known"].tolist() == [1.0] * 10
    if params.get("augmented"):    # the local optimum trained on past the personal model
        assert all((batched.state["optimum"][k] - batched.state["model"][k]).abs().amax(
            tuple(range(1, v.dim()))).min() > 0 for k, v in batched.state["model"].items())


def test_self_fl_records_its_steps_weights_and_variances_per_client(line_ctx, clients, federate):
    # The hand case above on the engine (oracle variances, one round, a batch holds a client's
    # samples): ℓ_m = 6, 11, 21 steps on the mean loss, taken as counted by the engine; Eqn. 11's
    # weights w_m / W = (2, 10/3, 5) / (31/3) = 6/31, 10/31, 15/31; σ_m² = 0.4, 0.2, 0.1; σ₀² 0.1.
    algorithm = _algorithm(oracle=ORACLE, lr=0.02)
    data = clients([(1, 1)], [(1, 1)] * 2, [(1, 1)] * 4)

    result = federate(algorithm, line_ctx, data, {"w": [0.0]})

    train = sorted((r for r in result.rows if r["split"] == "train"), key=lambda r: r["client"])
    assert [r["diag.local_steps"] for r in train] == [6, 11, 21]
    assert [r["steps"] for r in train] == [6, 11, 21]
    assert [r["diag.weight"] for r in train] == pytest.approx([6 / 31, 10 / 31, 15 / 31])
    assert [r["diag.sigma_sq"] for r in train] == pytest.approx([0.4, 0.2, 0.1])
    assert [r["diag.sigma0_sq"] for r in train] == pytest.approx([0.1] * 3)


def test_self_fl_on_digits_takes_more_than_one_step_where_eqn_8_applies(digits_ds3):
    # Issue 27: with estimated variances on real data ℓ_m was 1 in every client-round. From
    # round 3 (two recorded participations) Eqn. 8 applies; its ℓ_m is recorded and is the
    # number of steps the engine ran; before, ℓ_m is NaN (FedAvg's steps).
    _, s, _ = digits_ds3
    algorithm = _algorithm(lr=0.05)
    algorithm.head = s.head
    plan = Plan(rounds=4, local_epochs=1, batch_size=16, lr=0.05, seed=0)

    result = Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), plan).run(s.init)

    train = [r for r in result.rows if r["split"] == "train"]
    applied = [r for r in train if r["round"] >= 3]
    assert all(math.isnan(r["diag.local_steps"]) for r in train if r["round"] < 3)
    assert [r["diag.local_steps"] for r in applied] == [r["steps"] for r in applied]
    assert max(r["steps"] for r in applied) > 1
    assert sum(r["diag.weight"] for r in applied) == pytest.approx(2.0)   # rounds 3 and 4
