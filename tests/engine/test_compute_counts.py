"""Compute counts of algorithms whose steps pass over a mini-batch more than once, by hand.

Two clients of 3 and 5 samples; mini-batches of B = 2, so an epoch of client 0 is batches of 2
and 1 samples, client 1's of 2, 2 and 1 (a full batch: 3 and 5). ``samples`` counts a
mini-batch's real samples once per network pass an update makes over it (forward and backward;
docs/contracts.md, "Compute").
"""

import pytest
import torch
from torch import nn

from pflpipe.algorithms.apfl import Apfl
from pflpipe.algorithms.ditto import Ditto
from pflpipe.algorithms.fedavg_ft import FedAvgFT
from pflpipe.algorithms.per_fedavg import PerFedAvg
from pflpipe.algorithms.pfedbayes import PFedBayes
from pflpipe.algorithms.pfedme import PFedMe
from pflpipe.algorithms.pfedvem import PFedVem
from pflpipe.compute import totals
from pflpipe.compute.totals import client_totals
from pflpipe.distill import GridConfig, chosen_history, run_grid
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer
from pflpipe.spec.algorithms import (
    ApflParams,
    DittoParams,
    FedAvgFtParams,
    PerFedAvgParams,
    PFedBayesParams,
    PFedMeParams,
    PFedVemParams,
)
from pflpipe.training.score_rows import history_rows

SIZES = (3, 5)


class Affine(nn.Module):
    """ŷ = head(b·x): a one-weight base and a linear head (pFedVEM needs a head)."""

    def __init__(self):
        super().__init__()
        self.base = nn.Module()
        self.base.w = nn.Parameter(torch.ones(1))
        self.head = nn.Linear(1, 1)

    def forward(self, x):
        return self.head(x * self.base.w)


def _data(classification=False) -> FederatedData:
    xs = [torch.linspace(-1, 1, n).unsqueeze(1) for n in SIZES]
    if classification:
        xs = [torch.cat([x, -x], 1) for x in xs]
        ys = [torch.arange(n) % 2 for n in SIZES]
    else:
        ys = [torch.linspace(0, 1, n) for n in SIZES]
    split = SplitData.from_clients(xs, ys)
    return FederatedData(split, split, split)


def _train_rows(algorithm, trainer=BatchedTrainer, local_epochs=1, rounds=1, model=None):
    """Every train row and every test row of a run on the two clients."""
    ctx = Context(model or Affine(), "regression")
    init = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
    plan = Plan(rounds=rounds, local_epochs=local_epochs, batch_size=2, lr=0.01, seed=0)
    result = Federation(algorithm, ctx, _data(), trainer(ctx), plan).run(init)
    train = sorted((r for r in result.rows if r["split"] == "train"),
                   key=lambda r: (r["round"], r["client"]))
    test = sorted((r for r in result.rows if r["split"] == "test"),
                  key=lambda r: (r["round"], r["client"]))
    return train, test


def _counts(rows):
    return [(r["steps"], r["samples"]) for r in rows]


def _make(cls, params, **extra):
    return cls(params, head=frozenset({"head.weight", "head.bias"}), lr=0.01, local_epochs=1,
               **extra)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_pfedme_counts_each_of_its_k_inner_steps_as_a_pass(trainer):
    algorithm = _make(PFedMe, PFedMeParams(name="pfedme", inner_steps=4))

    train, _ = _train_rows(algorithm, trainer)

    # steps 2 and 3; each step 4 inner passes over its batch: 4·3 = 12 and 4·5 = 20
    assert _counts(train) == [(2, 12), (3, 20)]


def test_pfedbayes_counts_each_monte_carlo_draw_as_a_pass():
    algorithm = _make(PFedBayes, PFedBayesParams(name="pfedbayes", mc_samples=3))

    train, _ = _train_rows(algorithm, local_epochs=2)

    # 2 epochs of one full-batch step, 3 draws each: 2·3·3 = 18 and 2·3·5 = 30
    assert _counts(train) == [(2, 18), (2, 30)]


def test_pfedvem_counts_the_draws_of_its_e_step_and_of_its_base_epochs():
    algorithm = _make(PFedVem, PFedVemParams(name="pfedvem", mc_samples=2, head_steps=3))

    train, _ = _train_rows(algorithm)

    # E-step: 3 full-batch steps, 2 draws: 3·2·3 = 18 and 3·2·5 = 30;
    # base: one epoch (2 and 3 steps), 2 draws: 2·3 = 6 and 2·5 = 10
    assert _counts(train) == [(3 + 2, 18 + 6), (3 + 3, 30 + 10)]


def test_per_fedavg_hessian_free_counts_its_three_draws_and_the_third_twice():
    algorithm = _make(PerFedAvg, PerFedAvgParams(name="per_fedavg", variant="hessian_free"))

    train, _ = _train_rows(algorithm)

    # One step of 3 draws D, D′, D″ (⌈batches / 3⌉ = 1): client 0 draws 2, 1 and (epoch 2) 2
    # samples, client 1 2, 2 and 1; D″ is passed twice (the central difference ±δd):
    # 2 + 1 + 2·2 = 7 and 2 + 2 + 2·1 = 6
    assert _counts(train) == [(1, 7), (1, 6)]


def test_per_fedavg_first_order_counts_its_two_draws_once_each():
    algorithm = _make(PerFedAvg, PerFedAvgParams(name="per_fedavg"))

    train, _ = _train_rows(algorithm)

    # ⌈batches / 2⌉ steps of D and D′: client 0 one (2 + 1), client 1 two (2 + 2, then 1 and
    # the first batch of epoch 2, 2)
    assert _counts(train) == [(1, 3), (2, 7)]


def test_per_fedavg_adaptation_before_scoring_is_counted_at_every_evaluation():
    algorithm = _make(PerFedAvg, PerFedAvgParams(name="per_fedavg", adapt_steps=2))

    _, test = _train_rows(algorithm)

    # Evaluations at rounds 0 and 1; each adapts with 2 steps of B = 2 from the global model:
    # client 0 draws 2 + 1 samples, client 1 2 + 2
    assert [(r["round"], r["adaptation_steps"], r["adaptation_samples"]) for r in test] == [
        (0, 2, 3), (0, 2, 4), (1, 2, 3), (1, 2, 4)]
    history = history_rows(test, "per_fedavg", 0)
    assert {c: (t["adaptation_steps"], t["adaptation_samples"])
            for c, t in client_totals(history).items()} == {0: (4, 6), 1: (4, 8)}


def test_ditto_counts_the_global_models_epoch_and_the_personal_models_epochs():
    algorithm = _make(Ditto, DittoParams(name="ditto", personal_epochs=2))

    train, _ = _train_rows(algorithm)

    # w: one epoch (2 and 3 steps; 3 and 5 samples); v: two epochs (4 and 6; 6 and 10)
    assert _counts(train) == [(2 + 4, 3 + 6), (3 + 6, 5 + 10)]


def test_apfl_counts_both_models_passes():
    algorithm = _make(Apfl, ApflParams(name="apfl"))

    train, _ = _train_rows(algorithm)

    # f(w) and f(v̄) each pass over every batch: 2·3 and 2·5 (adaptive α adds a third pass)
    assert _counts(train) == [(2, 6), (3, 10)]


def test_fedavg_ft_counts_each_fine_tuning_epoch():
    algorithm = _make(FedAvgFT, FedAvgFtParams(name="fedavg_ft"))

    train, test = _train_rows(algorithm, rounds=3)

    # a round is one fine-tuning epoch; nothing sent, nothing to adapt before scoring
    assert _counts(train) == [(2, 3), (3, 5)] * 3
    assert {r["bytes_sent"] for r in train} == {0}
    assert all("adaptation_samples" not in r for r in test)


def test_distillation_grid_counts_every_student_of_the_grid():
    # Prepare: 2 λ × 2 T = 4 students per client, 2 epochs of B = 2
    ctx = Context(nn.Linear(2, 2))
    data = _data(classification=True)
    teachers = {k: v.detach().expand(2, *v.shape).clone()
                for k, v in ctx.model.state_dict().items()}
    config = GridConfig(lambdas=(0.1, 0.5), temperatures=(1.0, 2.0), epochs=2, batch_size=2,
                        lr=0.1)

    # Execute
    grid = run_grid(ctx, BatchedTrainer(ctx), data, teachers, config)
    rows = grid.epoch_compute(chosen_history(ctx, BatchedTrainer(ctx), data, teachers, config,
                                             grid.chosen), config.epochs)

    # Assert: 4 students × 2 epochs × (2 | 3 steps, 3 | 5 samples)
    assert grid.steps.tolist() == [16, 24] and grid.samples.tolist() == [24, 40]
    train = sorted((r["client"], r["round"], r.get("steps"), r.get("samples")) for r in rows
                    if r["split"] == "train")
    assert train == [(0, 0, None, None), (0, 1, 8, 12), (0, 2, 8, 12),
                     (1, 0, None, None), (1, 1, 12, 20), (1, 2, 12, 20)]
    history = history_rows(rows, "persfl", 0)
    assert totals.totals(history)["persfl"]["samples"] == 64
