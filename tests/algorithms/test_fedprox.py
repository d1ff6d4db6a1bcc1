"""FedProx: the proximal local objective by hand; batched == sequential."""

import pytest
import torch

from pflpipe.algorithms.fedprox import FedProx
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms import FedProxParams


def _fedprox(mu, lr=0.1, head=frozenset()):
    return FedProx(FedProxParams(name="fedprox", mu=mu), head=head, lr=lr, local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedprox_local_steps_add_the_proximal_pull_to_the_global_model(line_ctx, clients,
                                                                       federate, trainer):
    # Prepare: w_global = 0.5; client 0 (1, 1), client 1 (1, 0); μ = 1, lr 0.1, two steps.
    # gradient 2(w − y) + μ(w − 0.5):
    #   client 0: 0.5 − 0.1·(−1) = 0.6;  0.6 − 0.1·(−0.8 + 0.1) = 0.67
    #   client 1: 0.5 − 0.1·(1) = 0.4;   0.4 − 0.1·(0.8 − 0.1) = 0.33
    #   server: (0.67 + 0.33)/2 = 0.5
    data = clients([(1, 1)], [(1, 0)])

    # Execute
    result = federate(_fedprox(mu=1.0), line_ctx, data, {"w": [0.5]}, trainer=trainer,
                      local_epochs=2)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.67, 0.33]))
    assert torch.allclose(result.global_params["w"], torch.tensor([0.5]))


def test_fedprox_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                differences):
    _, s, _ = digits_ds3

    batched, sequential = on_both_trainers(_fedprox(mu=0.1, lr=0.05, head=s.head))

    assert differences(batched, sequential) == {}
