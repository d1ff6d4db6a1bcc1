"""The engine's merge of what a client starts a round from (`protocol.received`)."""

import torch

from pflpipe.algorithms.algorithm import Algorithm

GLOBAL = {"base.w": torch.tensor(1.0), "head.w": torch.tensor(2.0)}
PREVIOUS = {"model": {"base.w": torch.tensor(5.0), "head.w": torch.tensor(6.0)},
            "head": {"head.w": torch.tensor(7.0)}}


class HeadStays(Algorithm):
    """FedPer's split: the head is never sent."""

    def is_payload(self, key):
        return not key.startswith("head.")


class HeadKept(HeadStays):
    """FedRep's split: the head is never sent and lives in a kept group; a fresh copy of it."""

    kept = ("head",)

    def fresh(self, state, shared):
        return {"copy": {k: v + shared["global"]["base.w"] for k, v in state["head"].items()}}


def _values(tree):
    return {g: {k: float(v) for k, v in group.items()} for g, group in tree.items()}


def test_received_keeps_the_clients_own_values_of_the_keys_it_never_sends():
    state = HeadStays(None, head=frozenset(), lr=0.1, local_epochs=1).receive(GLOBAL, PREVIOUS)

    assert _values(state) == {"model": {"base.w": 1.0, "head.w": 6.0}}


def test_received_leaves_keys_a_kept_group_holds_out_of_model_then_adds_fresh_groups():
    algorithm = HeadKept(None, head=frozenset(), lr=0.1, local_epochs=1)

    state = algorithm.receive(GLOBAL, PREVIOUS, {"global": GLOBAL, "server": {}})

    assert _values(state) == {"model": {"base.w": 1.0}, "head": {"head.w": 7.0},
                              "copy": {"head.w": 8.0}}
    assert list(state) == ["model", "head", "copy"]
