"""LG-FedAvg: the head is averaged, the representation never leaves the client."""

import pytest
import torch

from pflpipe.algorithms.lg_fedavg import LgFedAvg
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import LgFedAvgParams

HEAD = frozenset({"head.w"})


def _lg(head=HEAD, lr=0.1):
    return LgFedAvg(LgFedAvgParams(name="lg_fedavg"), head=head, lr=lr, local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_lg_fedavg_averages_heads_and_keeps_representations(chain_ctx, clients, federate,
                                                            trainer):
    # Prepare: ŷ = h·b·x with b = 1, h = 0.5, lr 0.1; client 0 (1, 1), client 1 (1, −1).
    # Round 1, r = ŷ − y, ∇b = 2r·h, ∇h = 2r·b:
    #   client 0: r = −0.5 → b = 1 + 0.05 = 1.05, h = 0.5 + 0.1 = 0.6
    #   client 1: r = 1.5  → b = 1 − 0.15 = 0.85, h = 0.5 − 0.3 = 0.2;  global h = 0.4
    # Round 2 (own b, global h = 0.4):
    #   client 0: ŷ = 0.42, r = −0.58 → b = 1.05 + 0.0464 = 1.0964, h = 0.4 + 0.1218 = 0.5218
    #   client 1: ŷ = 0.34, r = 1.34  → b = 0.85 − 0.1072 = 0.7428, h = 0.4 − 0.2278 = 0.1722
    #   global h = ½(0.5218 + 0.1722) = 0.347; the global representation stays 1.
    # Execute
    result = federate(_lg(), chain_ctx, clients([(1, 1)], [(1, -1)]),
                      {"base.w": [1.0], "head.w": [0.5]}, trainer=trainer, rounds=2)

    # Assert
    assert torch.allclose(result.state["model"]["base.w"].flatten(),
                          torch.tensor([1.0964, 0.7428]))
    assert torch.allclose(result.global_params["head.w"], torch.tensor([0.347]))
    assert torch.allclose(result.global_params["base.w"], torch.tensor([1.0]))


def test_lg_fedavg_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                  differences):
    _, s, _ = digits_ds3

    batched, sequential = on_both_trainers(_lg(head=s.head, lr=0.05))

    assert differences(batched, sequential) == {}
