"""Fixtures of the algorithm tests.

Tiny cases use a one-weight regression model, ŷ = w·x with loss (w·x − y)², so that every
gradient, 2x(w·x − y), and every update can be worked out by hand in the test's comments; a
batch covers all of a client's samples, so one epoch is one step. The batched == sequential tests
run on a real digits ds3 partition (10 clients of very unequal sizes), built once per session.
"""

import pytest
import torch
from torch import nn

from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer, make_trainer
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup


class Line(nn.Module):
    """ŷ = w·x with one weight `w` (x and ŷ of shape [B, 1])."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x * self.w


class Chain(nn.Module):
    """ŷ = h·b·x: a one-weight base (`base.w`) and a one-weight head (`head.w`)."""

    head_prefixes = ("head.",)

    def __init__(self):
        super().__init__()
        self.base, self.head = Line(), Line()

    def forward(self, x):
        return self.head(self.base(x))


@pytest.fixture
def line_ctx():
    """Context of the one-weight model, squared-error loss."""
    return Context(Line(), "regression")


@pytest.fixture
def chain_ctx():
    """Context of the base × head model, squared-error loss."""
    return Context(Chain(), "regression")


@pytest.fixture
def clients():
    """Build FederatedData from per-client lists of (x, y) pairs (the same samples in every
    split), e.g. ``clients([(1, 1)], [(1, -1), (2, 0)])``; `dtype` float for regression,
    ``torch.long`` labels with vector inputs for classification.
    """

    def make(*samples, classification=False):
        xs, ys = [], []
        for client in samples:
            xs.append(torch.tensor([[float(v) for v in (x if classification else [x])]
                                    for x, _ in client]))
            ys.append(torch.tensor([y for _, y in client],
                                   dtype=torch.long if classification else torch.float32))
        split = SplitData.from_clients(xs, ys)
        return FederatedData(split, split, split)

    return make


@pytest.fixture
def federate():
    """Run an algorithm's rounds on tiny data with one trainer; the batch covers every sample
    unless `batch_size` says otherwise.
    """

    def run(algorithm, ctx, data, init, trainer=BatchedTrainer, rounds=1, lr=None,
            batch_size=64, local_epochs=1, seed=0, fraction=1.0):
        plan = Plan(rounds=rounds, local_epochs=local_epochs, batch_size=batch_size,
                    lr=lr or algorithm.lr, seed=seed, client_fraction=fraction)
        init = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in init.items()}
        return Federation(algorithm, ctx, data, trainer(ctx), plan).run(init)

    return run


DS3 = """\
experiment: {name: algorithms-ds3}
dataset: {name: digits}
partition: {strategy: ds3, n_clients: 10, min_samples: 10}
federation: {rounds: 2, batch_size: 16, lr: 0.05}
tracking: {enabled: false}
"""


@pytest.fixture(scope="session")
def digits_ds3(tmp_path_factory, test_device):
    """(spec, Setup, root) of a digits ds3 partition over 10 clients of unequal sizes."""
    root = tmp_path_factory.mktemp("algorithms-ds3")
    spec = parse_spec(DS3 + f"engine: {{device: {test_device}}}\n"
                      f"storage: {{kind: local, path: {root / 'store'}}}\n")
    partition_data.run(spec, 0, root / "partition")
    return spec, stage_setup.setup(spec, 0, root / "partition"), root


@pytest.fixture(scope="session")
def on_both_trainers(digits_ds3, compiled):
    """Run an algorithm for `rounds` rounds on the ds3 partition with the batched (eager, or
    with `compiled` steps) and the sequential trainer (plain SGD, lr 0.05, batch 16, one local
    epoch); return both results.
    """
    _, s, _ = digits_ds3

    def batched(ctx):
        return make_trainer("batched", ctx, compile=compiled)

    def run(algorithm, rounds=3, init=None):
        plan = Plan(rounds=rounds, local_epochs=algorithm.local_epochs, batch_size=16,
                    lr=algorithm.lr, seed=0)
        return tuple(Federation(algorithm, s.ctx, s.data, trainer(s.ctx), plan).run(init or s.init)
                     for trainer in (batched, SequentialTrainer))

    return run


@pytest.fixture(scope="session")
def differences():
    """Every tensor on which two federation results differ by more than `atol`: the final client
    state (each group), the global model and the best-on-validation parameters, as
    {name: max |a − b|}.
    """

    def diff(a, b, atol=1e-5):
        pairs = [(f"state.{g}.{k}", a.state[g][k], b.state[g][k])
                 for g in a.state for k in a.state[g]]
        pairs += [(f"global.{k}", a.global_params[k], b.global_params[k])
                  for k in a.global_params]
        pairs += [(f"best_params.{k}", a.best_params[k], b.best_params[k])
                  for k in a.best_params]
        out = {name: float((x - y).abs().max()) for name, x, y in pairs}
        assert a.state.keys() == b.state.keys()
        return {name: value for name, value in out.items() if not value <= atol}

    return diff
