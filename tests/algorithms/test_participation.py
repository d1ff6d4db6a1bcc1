"""Partial participation (activity rate C) for every federated algorithm, drawn from the seed."""

import pytest
import torch

from pflpipe.algorithms import REGISTRY
from pflpipe.spec import parse_spec
from pflpipe.spec.algorithms import PARAMS, FederatedParams

FEDERATED = sorted(name for name, cls in PARAMS.items()
                   if issubclass(cls, FederatedParams) and name in REGISTRY)


def _algorithm(name):
    """`name` on the base × head model (the head `head.w` for the algorithms that keep one)."""
    return REGISTRY[name](PARAMS[name](name=name), head=frozenset({"head.w"}), lr=0.1,
                          local_epochs=1)


def _sampled(result, round_idx):
    return sorted(r["client"] for r in result.rows if r["split"] == "train"
                  and r["round"] == round_idx)


@pytest.fixture
def ten(clients):
    """Ten one-sample clients (1, c/10)."""
    return clients(*[[(1, c / 10)] for c in range(10)])


@pytest.mark.parametrize("name", FEDERATED)
def test_every_federated_algorithm_trains_only_the_sampled_clients(name, chain_ctx, ten, federate):
    # Prepare: C = 0.3 of 10 clients; the state before any round
    init = {"base.w": [0.5], "head.w": [1.0]}
    start = federate(_algorithm(name), chain_ctx, ten, init, rounds=0)

    # Execute
    result = federate(_algorithm(name), chain_ctx, ten, init, rounds=1, fraction=0.3)

    # Assert: 3 clients trained; the others' every group is as it started; all are scored
    sampled = _sampled(result, 1)
    assert len(sampled) == 3
    for group, tensors in start.state.items():
        for key, value in tensors.items():
            for client in set(range(10)) - set(sampled):
                assert torch.equal(result.state[group][key][client], value[client]), (group, key)
    assert sorted(r["client"] for r in result.rows if r["split"] == "test"
                  and r["round"] == 1) == list(range(10))


def test_the_sample_is_drawn_from_the_seed(line_ctx, ten, federate):
    first = federate(_algorithm("self_fl"), line_ctx, ten, {"w": [0.5]}, rounds=3, fraction=0.2)
    again = federate(_algorithm("self_fl"), line_ctx, ten, {"w": [0.5]}, rounds=3, fraction=0.2)
    other = federate(_algorithm("self_fl"), line_ctx, ten, {"w": [0.5]}, rounds=3, fraction=0.2,
                     seed=1)

    draws = [_sampled(first, t) for t in (1, 2, 3)]
    assert all(len(d) == 2 for d in draws) and len({tuple(d) for d in draws}) > 1
    assert draws == [_sampled(again, t) for t in (1, 2, 3)]
    assert draws != [_sampled(other, t) for t in (1, 2, 3)]
    assert torch.equal(first.global_params["w"], again.global_params["w"])


def test_an_entry_samples_its_own_client_fraction():
    spec = parse_spec("""\
experiment: {name: fraction}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 4}
federation: {client_fraction: 0.5}
personalization:
  - {name: self_fl, client_fraction: 0.25}
  - {name: ditto}
""")

    own, default = (entry.rounds_of(spec.federation) for entry in spec.personalization)

    assert (own.client_fraction, default.client_fraction) == (0.25, 0.5)
