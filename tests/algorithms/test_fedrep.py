"""FedRep: the head's epochs with the base frozen, then the base's with the new head frozen."""

import pytest
import torch

from pflpipe.algorithms.fedrep import FedRep
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import FedRepParams


def _fedrep(head=frozenset({"head.w"}), lr=0.1, head_epochs=1):
    return FedRep(FedRepParams(name="fedrep", head_epochs=head_epochs), head=head, lr=lr,
                  local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedrep_trains_the_head_then_the_base_and_scores_the_global_base_with_own_head(
        chain_ctx, clients, federate, trainer):
    # Prepare: ŷ = h·b·x with b = h = 1, lr 0.1, one head epoch then one base epoch (one step
    # each). Residual r = h·b·x − y; ∇h = 2r·b·x, ∇b = 2r·h·x.
    # Client 0, one sample (1, 3): head r = −2, ∇h = −4 -> h = 1.4;
    #   base r = 1.4 − 3 = −1.6, ∇b = 2·(−1.6)·1.4 = −4.48 -> b = 1.448
    # Client 1, three samples (1, −1): head r = 2, ∇h = 4 -> h = 0.6;
    #   base r = 0.6 + 1 = 1.6, ∇b = 2·1.6·0.6 = 1.92 -> b = 0.808
    # Server (weights ¼, ¾): base 0.25·1.448 + 0.75·0.808 = 0.968; the global head stays 1.
    # Scored: client 0 predicts 1.4·0.968 = 1.3552, loss (1.3552 − 3)² = 2.70536704;
    #         client 1 predicts 0.6·0.968 = 0.5808, loss (0.5808 + 1)² = 2.49892864.
    data = clients([(1, 3)], [(1, -1)] * 3)

    # Execute
    result = federate(_fedrep(), chain_ctx, data, {"base.w": [1.0], "head.w": [1.0]},
                      trainer=trainer)

    # Assert
    assert torch.allclose(result.state["head"]["head.w"].flatten(), torch.tensor([1.4, 0.6]))
    assert torch.allclose(result.state["model"]["base.w"].flatten(), torch.tensor([1.448, 0.808]))
    assert torch.allclose(result.global_params["base.w"], torch.tensor([0.968]))
    assert torch.allclose(result.global_params["head.w"], torch.tensor([1.0]))
    assert torch.allclose(result.last["val_loss"], torch.tensor([2.70536704, 2.49892864]))


def test_fedrep_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                               differences):
    _, s, _ = digits_ds3

    batched, sequential = on_both_trainers(_fedrep(head=s.head, lr=0.05, head_epochs=2))

    assert differences(batched, sequential) == {}
    heads = batched.state["head"]["head.weight"]
    assert not torch.allclose(heads[0], heads[1])     # each client kept its own head
