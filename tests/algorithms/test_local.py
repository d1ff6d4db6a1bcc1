"""Local-only: nothing is sent; every client keeps training its own model, epoch after epoch."""

import pytest
import torch

from pflpipe.algorithms.local import Local
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import LocalParams


def _local(head=frozenset(), lr=0.1):
    return Local(LocalParams(name="local"), head=head, lr=lr, local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_local_clients_train_alone_from_their_own_models(line_ctx, clients, federate, trainer):
    # Prepare: client 0 (1, 1), client 1 (1, −1); w = 0, lr 0.1; two epochs ("rounds").
    # Epoch 1: w_0 = 0 − 0.1·2(0 − 1) = 0.2, w_1 = −0.2
    # Epoch 2: w_0 = 0.2 − 0.1·2(0.2 − 1) = 0.36, w_1 = −0.36
    # (restarting from an averaged model, 0, would give 0.2 again)
    # Execute
    result = federate(_local(), line_ctx, clients([(1, 1)], [(1, -1)]), {"w": [0.0]},
                      trainer=trainer, rounds=2)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.36, -0.36]))
    assert torch.allclose(result.global_params["w"], torch.tensor([0.0]))
    assert torch.allclose(result.best_params["w"].flatten(), torch.tensor([0.36, -0.36]))


def test_local_batched_equals_sequential_after_3_epochs_on_ds3(digits_ds3, on_both_trainers,
                                                              differences):
    _, s, _ = digits_ds3

    batched, sequential = on_both_trainers(_local(head=s.head, lr=0.05))

    assert differences(batched, sequential) == {}
