"""FedAvg: the server's mean weighted by n_k / n, and one round worked out by hand."""

import pytest
import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer
from pflpipe.models import LogisticRegression


def _fedavg(lr=0.5):
    return FedAvg(None, head=frozenset(), lr=lr, local_epochs=1)


def test_fedavg_aggregate_is_the_mean_weighted_by_client_size():
    # Prepare: two clients holding 1 and 3 samples -> weights 1/4 and 3/4
    global_params = {"w": torch.tensor([0.0, 0.0])}
    payloads = {"w": torch.tensor([[1.0, 2.0], [4.0, 8.0]])}
    weights = torch.tensor([1.0, 3.0]) / 4

    # Execute
    new = _fedavg().aggregate(global_params, payloads, weights)

    # Assert: 1/4·[1, 2] + 3/4·[4, 8] = [0.25 + 3, 0.5 + 6]
    assert torch.allclose(new["w"], torch.tensor([3.25, 6.5]))


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedavg_round_averages_hand_computed_client_steps(clients, federate, trainer):
    # Prepare: logistic regression 2 features -> 2 classes, all weights zero, so every
    # softmax is (1/2, 1/2) and d(mean CE)/d(logit_c) = (1/2 − [y = c]) / n per sample.
    # Client 0 (2 samples): x (1, 0) y 0; x (0, 1) y 1.
    #   row 0 of ∇W: [(−½)(1, 0) + (½)(0, 1)] / 2 = (−¼, ¼); row 1 = −row 0; ∇b = (0, 0)
    #   one step of lr ½: W0 = [[⅛, −⅛], [−⅛, ⅛]], b0 = (0, 0)
    # Client 1 (4 samples): x (1, 0) y 1 twice; x (0, 1) y 1; x (0, 1) y 0.
    #   row 0 of ∇W: [½(1, 0) + ½(1, 0) + ½(0, 1) − ½(0, 1)] / 4 = (¼, 0); row 1 = −row 0
    #   ∇b = ((½ + ½ + ½ − ½) / 4, −that) = (¼, −¼)
    #   one step: W1 = [[−⅛, 0], [⅛, 0]], b1 = (−⅛, ⅛)
    # Server, weights 2/6 and 4/6: W = ⅓·W0 + ⅔·W1 = [[−1/24, −1/24], [1/24, 1/24]],
    #   b = ⅔·b1 = (−1/12, 1/12).
    data = clients([((1, 0), 0), ((0, 1), 1)],
                   [((1, 0), 1), ((1, 0), 1), ((0, 1), 1), ((0, 1), 0)], classification=True)
    ctx = Context(LogisticRegression((2,), 2))
    init = {"head.weight": torch.zeros(2, 2), "head.bias": torch.zeros(2)}

    # Execute
    result = federate(_fedavg(lr=0.5), ctx, data, init, trainer=trainer)

    # Assert
    expected_w = torch.tensor([[-1.0, -1.0], [1.0, 1.0]]) / 24
    assert torch.allclose(result.global_params["head.weight"], expected_w, atol=1e-7)
    assert torch.allclose(result.global_params["head.bias"], torch.tensor([-1.0, 1.0]) / 12,
                          atol=1e-7)
    assert torch.allclose(result.state["model"]["head.weight"][1],
                          torch.tensor([[-0.125, 0.0], [0.125, 0.0]]), atol=1e-7)


def test_fedavg_batched_equals_sequential_after_3_rounds_on_ds3(on_both_trainers, differences):
    batched, sequential = on_both_trainers(_fedavg(lr=0.05))

    assert differences(batched, sequential) == {}


def test_fedavg_averages_integer_buffers_in_floating_point_and_rounds():
    # Prepare: a BatchNorm-style batch counter, 3 and 6 on clients weighted 1/3, 2/3 → 5;
    # cast to the integer dtype first, the weights would be 0 and the mean 0.
    payloads = {"num_batches_tracked": torch.tensor([3, 6])}
    weights = torch.tensor([1 / 3, 2 / 3])

    # Execute
    new = _fedavg().aggregate({}, payloads, weights)

    # Assert
    assert new["num_batches_tracked"].dtype == torch.int64
    assert int(new["num_batches_tracked"]) == 5
