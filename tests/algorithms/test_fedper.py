"""FedPer: the base is averaged, the head never leaves the client and is what it scores with."""

import pytest
import torch

from pflpipe.algorithms.fedper import FedPer
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import FedPerParams

HEAD = frozenset({"head.w"})


def _fedper(head=HEAD, lr=0.1):
    return FedPer(FedPerParams(name="fedper"), head=head, lr=lr, local_epochs=1)


def test_fedper_sends_the_base_and_keeps_the_head():
    algorithm = _fedper()

    assert algorithm.is_payload("base.w")
    assert not algorithm.is_payload("head.w")


def test_fedper_receive_takes_the_global_base_and_keeps_the_own_head():
    previous = {"model": {"base.w": torch.tensor([5.0]), "head.w": torch.tensor([7.0])}}
    global_params = {"base.w": torch.tensor([1.0]), "head.w": torch.tensor([2.0])}

    state = _fedper().receive(global_params, previous)

    assert state["model"] == {"base.w": torch.tensor([1.0]), "head.w": torch.tensor([7.0])}


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedper_round_averages_bases_and_scores_global_base_with_own_head(chain_ctx, clients,
                                                                          federate, trainer):
    # Prepare: ŷ = h·b·x with b = h = 1, lr 0.1. Residual r = h·b·x − y;
    #   ∇b = 2r·h·x, ∇h = 2r·b·x (mean over the client's samples).
    # Client 0, one sample (1, 3): r = −2, ∇b = ∇h = −4 -> b = h = 1.4
    # Client 1, three samples (1, −1): r = 2, ∇b = ∇h = 4 -> b = h = 0.6
    # Server (weights ¼, ¾): base 0.25·1.4 + 0.75·0.6 = 0.8; the global head stays 1.
    # Scored: client 0 predicts 1.4·0.8 = 1.12, loss (1.12 − 3)² = 3.5344;
    #         client 1 predicts 0.6·0.8 = 0.48, loss (0.48 + 1)² = 2.1904.
    data = clients([(1, 3)], [(1, -1)] * 3)

    # Execute
    result = federate(_fedper(), chain_ctx, data, {"base.w": [1.0], "head.w": [1.0]},
                      trainer=trainer)

    # Assert
    assert torch.allclose(result.global_params["base.w"], torch.tensor([0.8]))
    assert torch.allclose(result.global_params["head.w"], torch.tensor([1.0]))
    assert torch.allclose(result.state["model"]["head.w"].flatten(), torch.tensor([1.4, 0.6]))
    assert torch.allclose(result.last["val_loss"], torch.tensor([3.5344, 2.1904]))


def test_fedper_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                               differences):
    _, s, _ = digits_ds3
    algorithm = _fedper(head=s.head, lr=0.05)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}
    heads = batched.state["model"]["head.weight"]
    assert not torch.allclose(heads[0], heads[1])     # each client kept its own head
