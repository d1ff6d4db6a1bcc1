"""SCAFFOLD: the corrected local gradient, option II control update, the server's control step."""

import pytest
import torch

from pflpipe.algorithms.algorithm import Round
from pflpipe.algorithms.scaffold import Scaffold
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec.algorithms.scaffold_params import ScaffoldParams


def _scaffold(lr=0.1, **params):
    return Scaffold(ScaffoldParams(name="scaffold", **params), head=frozenset(), lr=lr,
                    local_epochs=1)


def test_scaffold_control_update_is_the_mean_gradient_taken():
    # Prepare: K = 3 steps whose gradients summed to −3.6 (Σg); c_i = 0.5, c = 0.2.
    # c_i⁺ = −3.6 / 3 = −1.2; Δc_i = −1.7; K and Σg back to 0.
    algorithm = _scaffold()
    start = {"model": {"w": torch.tensor([1.0])}, "control": {"w": torch.tensor([0.5])},
             "steps": {"count": torch.tensor(0.0)}, "gradients": {"w": torch.tensor([0.0])}}
    trained = {"model": {"w": torch.tensor([0.4])}, "control": {"w": torch.tensor([0.5])},
               "steps": {"count": torch.tensor(3.0)}, "gradients": {"w": torch.tensor([-3.6])}}

    # Execute
    out = algorithm.finish(start, trained, {"server": {"control": {"w": torch.tensor([0.2])}}})

    # Assert
    assert torch.allclose(out["control"]["w"], torch.tensor([-1.2]))
    assert torch.allclose(out["control_delta"]["w"], torch.tensor([-1.7]))
    assert out["steps"]["count"] == 0
    assert torch.equal(out["gradients"]["w"], torch.tensor([0.0]))
    assert torch.equal(out["model"]["w"], torch.tensor([0.4]))


def _one_client_ten_steps(line_ctx, clients, trainer, optimizer, lr):
    """One round of 10 full-batch steps of the client (x, y) = (1, 1) from w = 0."""
    plan = Plan(rounds=1, local_epochs=10, batch_size=64, lr=lr, seed=0, optimizer=optimizer)
    algorithm = _scaffold(lr=lr)
    return Federation(algorithm, line_ctx, clients([(1, 1)]), trainer(line_ctx), plan).run(
        {"w": torch.tensor([0.0])})


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_scaffold_control_is_the_mean_gradient_under_momentum(line_ctx, clients, trainer):
    # Prepare: loss (w − 1)², gradient g = 2(w − 1); SGD momentum 0.9 (b = 0.9·b + g,
    # w = w − 0.01·b), 10 steps from w = 0 (c = c_i = 0 in round 1, so g is the step's gradient):
    #   w = 0, 0.02, 0.0576, 0.110288, 0.175501, 0.250684, 0.333334, 0.421052, 0.511578,
    #       0.602819, and y = 0.692880 after the 10th step;
    #   g = −2, −1.96, −1.8848, −1.7794, −1.6490, −1.4986, −1.3333, −1.1579, −0.9768, −0.7944,
    #   mean −1.50343 = c_i (and c = (1/1)·Δc_i). Option II, (x − y)/(Kη) = −0.69288/0.1,
    #   would give −6.93 (issue 27).
    momentum = OptimizerConfig("sgd", momentum=0.9)

    # Execute
    result = _one_client_ten_steps(line_ctx, clients, trainer, momentum, lr=0.01)

    # Assert
    assert torch.allclose(result.state["control"]["w"].flatten(), torch.tensor([-1.50343]),
                          atol=1e-4)
    assert torch.allclose(result.server["control"]["w"], torch.tensor([-1.50343]), atol=1e-4)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_scaffold_control_is_the_mean_gradient_under_adam(line_ctx, clients, trainer):
    # Prepare: the same client under Adam (lr 0.1); the reference is torch.optim.Adam's own
    # trajectory and the mean of its 10 gradients 2(w_t − 1).
    w = torch.zeros(1, requires_grad=True)
    reference, gradients = torch.optim.Adam([w], lr=0.1), []
    for _ in range(10):
        reference.zero_grad()
        ((w - 1) ** 2).sum().backward()
        gradients.append(w.grad.clone())
        reference.step()

    # Execute
    result = _one_client_ten_steps(line_ctx, clients, trainer, OptimizerConfig("adam"), lr=0.1)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(), w.detach(), atol=1e-5)
    assert torch.allclose(result.state["control"]["w"].flatten(),
                          torch.stack(gradients).mean(0), atol=1e-5)


def test_scaffold_server_steps_the_model_and_the_control_over_the_sampled_share():
    # Prepare: clients 0 and 2 of N = 4 (n = 1, 3) upload y = 2, 4 and Δc = 1, 3; x = 1, c = 0.5,
    # η_g = 0.5. Weighted mean of y: 0.25·2 + 0.75·4 = 3.5 → x = 1 + 0.5·(3.5 − 1) = 2.25.
    # c = 0.5 + (2/4)·mean(1, 3) = 1.5.
    algorithm = _scaffold(server_lr=0.5)
    round_ = Round(index=1, clients=torch.tensor([0, 2]), counts=torch.tensor([1, 3]),
                   n_clients=4, global_params={"w": torch.tensor([1.0])},
                   server={"control": {"w": torch.tensor([0.5])}},
                   states={"model": {"w": torch.tensor([[2.0], [4.0]])},
                           "control_delta": {"w": torch.tensor([[1.0], [3.0]])}})

    # Execute
    new_global, server = algorithm.server_step(round_)

    # Assert
    assert torch.allclose(new_global["w"], torch.tensor([2.25]))
    assert torch.allclose(server["control"]["w"], torch.tensor([1.5]))


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_scaffold_second_round_follows_the_corrected_gradient(line_ctx, clients, federate,
                                                              trainer):
    # Prepare: clients (1, 1) and (1, −1), w = 0, η = 0.1, two local steps a round.
    # Round 1 (c = c_i = 0, plain SGD): y_0 = 0.2, then 0.2 − 0.1·2(0.2 − 1) = 0.36; y_1 = −0.36.
    #   c_0 = (0 − 0.36)/(2·0.1) = −1.8, c_1 = 1.8; x = 0; c = 0 + mean(−1.8, 1.8) = 0.
    # Round 2, client 0, gradient 2(y − 1) − c_0 + c = 2(y − 1) + 1.8:
    #   y = 0 − 0.1·(−0.2) = 0.02, then 0.02 − 0.1·(2(0.02 − 1) + 1.8) = 0.036 (FedAvg: 0.36);
    #   c_0 = −1.8 − 0 + (0 − 0.036)/0.2 = −1.98.
    data = clients([(1, 1)], [(1, -1)])

    # Execute
    result = federate(_scaffold(), line_ctx, data, {"w": [0.0]}, trainer=trainer, rounds=2,
                      local_epochs=2)

    # Assert
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.036, -0.036]))
    assert torch.allclose(result.state["control"]["w"].flatten(), torch.tensor([-1.98, 1.98]))
    assert torch.allclose(result.global_params["w"], torch.tensor([0.0]), atol=1e-7)
    assert torch.allclose(result.server["control"]["w"], torch.tensor([0.0]), atol=1e-6)


def test_scaffold_batched_equals_sequential_after_3_rounds_on_ds3(digits_ds3, on_both_trainers,
                                                                 differences):
    _, s, _ = digits_ds3
    algorithm = Scaffold(ScaffoldParams(name="scaffold"), head=s.head, lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_scaffold_records_the_control_norms_and_uploads_its_control_delta(line_ctx, clients,
                                                                         federate, trainer):
    # Prepare: clients (1, 1) and (1, 0), w = 0, η = 0.1, one local step.
    # Client 0: y = 0 − 0.1·2(0 − 1) = 0.2, c_0 = (0 − 0.2)/(1·0.1) = −2; client 1: y = 0, c_1 = 0.
    # c = 0 + (2/2)·mean(−2, 0) = −1. So ‖c_0‖ = 2, ‖c_1‖ = 0, ‖c‖ = 1 for both rows.
    # Sent: y and Δc_i (4 bytes each); received: x and c (4 bytes each).
    data = clients([(1, 1)], [(1, 0)])

    # Execute
    result = federate(_scaffold(), line_ctx, data, {"w": [0.0]}, trainer=trainer)

    # Assert
    rows = sorted((r for r in result.rows if r["split"] == "train"), key=lambda r: r["client"])
    assert [r["diag.client_control_norm"] for r in rows] == pytest.approx([2.0, 0.0])
    assert [r["diag.control_norm"] for r in rows] == pytest.approx([1.0, 1.0])
    assert [(r["bytes_sent"], r["bytes_received"]) for r in rows] == [(8, 8), (8, 8)]
