"""The v2 hooks on toy algorithms: server state, per-client dispatch and schedule, finish,
client-state-aware aggregation, engine noise, prediction through `predict`, extra modules.

Hand computations use the one-weight model ŷ = w·x with loss (w·x − y)², gradient 2x(w·x − y).
"""

import pytest
import torch
from torch import nn

from pflpipe.algorithms.algorithm import Algorithm, Phase
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.training.results_files import client_models


class Toy(Algorithm):
    """Every new hook, each with an effect that can be followed by hand.

    - server state ``shift[c]``: how far client c's last trained w lay from the new global model;
    - dispatch: client c starts from global + shift[c] (so it continues from its own model);
    - schedule: client c takes c + 1 steps at lr 0.1·(c + 1);
    - finish: counts the client's participations in the kept group ``seen``;
    - server_step: the global model is the mean of the trained w weighted by (c + 1).
    """

    kept = ("seen",)

    def init_server(self, global_params, n_clients):
        return {"shift": {"value": torch.zeros(n_clients)}}

    def init_kept(self, global_params):
        return {"seen": {"n": torch.tensor(0.0)}}

    def dispatch(self, round):
        shift = round.server["shift"]["value"][round.clients]
        return {"w": round.global_params["w"] + shift.unsqueeze(-1)}

    def schedule(self, round, phase, steps, lr):
        return round.clients + 1, 0.1 * (round.clients + 1).float()

    def finish(self, start, trained, shared):
        return {**trained, "seen": {"n": start["seen"]["n"] + 1}}

    def server_step(self, round):
        weights = (round.clients + 1).float()
        trained = round.states["model"]["w"].flatten()
        new = (weights * trained).sum() / weights.sum()
        shift = round.server["shift"]["value"].clone()
        shift[round.clients] = trained - new
        return {"w": new.view(1)}, {"shift": {"value": shift}}


def _toy(cls=Toy, lr=0.1):
    return cls(None, head=frozenset(), lr=lr, local_epochs=1)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_hooks_two_rounds_match_hand_computed_global_server_and_client_state(
        line_ctx, clients, federate, trainer):
    # Prepare: client 0 (1, 1), client 1 (1, −1); w = 0.
    # Round 1: both start at 0. Client 0: 1 step, lr 0.1: 0 − 0.1·2(0 − 1) = 0.2.
    #   Client 1: 2 steps, lr 0.2: 0 − 0.2·2(0 + 1) = −0.4; −0.4 − 0.2·2(−0.4 + 1) = −0.64.
    #   Global (1·0.2 + 2·(−0.64)) / 3 = −0.36; shift = [0.56, −0.28].
    # Round 2: starts −0.36 + 0.56 = 0.2 and −0.36 − 0.28 = −0.64.
    #   Client 0: 0.2 − 0.1·2(0.2 − 1) = 0.36.
    #   Client 1: −0.64 − 0.2·2(0.36) = −0.784; −0.784 − 0.2·2(0.216) = −0.8704.
    #   Global (0.36 − 2·0.8704) / 3 = −0.460267; shift = [0.820267, −0.410133].
    data = clients([(1, 1)], [(1, -1)])

    # Execute
    result = federate(_toy(), line_ctx, data, {"w": [0.0]}, trainer=trainer, rounds=2)

    # Assert
    assert torch.allclose(result.global_params["w"], torch.tensor([-0.460267]), atol=1e-6)
    assert torch.allclose(result.state["model"]["w"].flatten(), torch.tensor([0.36, -0.8704]),
                          atol=1e-6)
    assert torch.allclose(result.server["shift"]["value"], torch.tensor([0.820267, -0.410133]),
                          atol=1e-6)
    assert result.state["seen"]["n"].tolist() == [2.0, 2.0]
    train_rows = [r for r in result.rows if r["split"] == "train" and r["round"] == 1]
    # the mean loss over each client's own steps: (0 − 1)² = 1 for client 0, (1 + 0.36) / 2
    assert [round(r["loss"], 6) for r in train_rows] == [1.0, 0.68]


class Noisy(Algorithm):
    """Perturbed SGD: the loss of w + 0.1·ε with ε drawn from the engine every step."""

    def local_objective(self, state, batch, shared, hp, ctx):
        w = state["model"]
        noisy = {k: v + 0.1 * ctx.normal(batch["key"], v.shape, salt=i)
                 for i, (k, v) in enumerate(sorted(w.items()))}
        return ctx.task_loss(noisy, batch)


def test_engine_noise_gives_batched_equal_sequential_on_ds3(digits_ds3, on_both_trainers,
                                                            differences):
    _, s, _ = digits_ds3
    algorithm = Noisy(None, head=s.head, lr=0.05, local_epochs=1)

    batched, sequential = on_both_trainers(algorithm)

    assert differences(batched, sequential) == {}


def test_engine_noise_does_not_depend_on_the_global_rng(line_ctx, clients, federate):
    # Prepare: two identical clients; noise makes their models differ, not the global RNG
    data = clients([(1, 1)], [(1, 1)])

    # Execute
    torch.manual_seed(1)
    first = federate(_toy(Noisy), line_ctx, data, {"w": [0.0]}, rounds=2)
    torch.manual_seed(2)
    torch.rand(100)
    second = federate(_toy(Noisy), line_ctx, data, {"w": [0.0]}, rounds=2)

    # Assert
    w = first.state["model"]["w"].flatten()
    assert w[0] != w[1]                        # each member draws its own noise
    assert torch.equal(w, second.state["model"]["w"].flatten())
    assert torch.equal(first.global_params["w"], second.global_params["w"])


class Mixture(Algorithm):
    """Scores the mean of the global-trained w and a kept personal v that never trains."""

    kept = ("personal",)

    def init_kept(self, global_params):
        return {"personal": {"w": torch.tensor([2.0])}}

    def scored(self, state, shared):
        return {"model": state["model"], "personal": state["personal"]}

    def predict(self, model, x, ctx, key):
        return 0.5 * (ctx.forward(model["model"], x) + ctx.forward(model["personal"], x))


def test_predict_hook_is_what_the_engine_scores_and_the_global_model_is_scored_too(
        line_ctx, clients, federate):
    # Prepare: one client (1, 1), w = 0 and v = 2; one round at lr 0.1 trains w to 0.2.
    # Scored output (0.2 + 2) / 2 = 1.1 → squared error 0.01; the global model (w = 0.2 after
    # aggregating the one client) alone: (0.2 − 1)² = 0.64.
    data = clients([(1, 1)])

    # Execute
    result = federate(_toy(Mixture), line_ctx, data, {"w": [0.0]}, rounds=1)

    # Assert
    assert result.last["test_loss"].tolist() == pytest.approx([0.01])
    assert result.last["global_test_loss"].tolist() == pytest.approx([0.64])
    last_row = [r for r in result.rows if r["round"] == 1 and r["split"] == "test"][0]
    assert last_row["loss"] == pytest.approx(0.01)
    assert last_row["global_loss"] == pytest.approx(0.64)
    assert set(result.best_model) == {"model", "personal"}
    models = client_models(result.best_model)
    assert set(models["client_0000"]) == {"w", "personal/w"}


class Gated(Algorithm):
    """Declares a module `gate`: y = w·x + gate(x), the gate shared by the server."""

    def modules(self, in_shape, n_outputs):
        return {"gate": nn.Linear(in_shape[0], n_outputs)}

    def receive(self, global_params, previous, shared=None):
        return {**super().receive(global_params, previous, shared),
                "gate": dict(shared["server"]["gate"])}

    def phases(self):
        return (Phase(train=("model", "gate")),)

    def local_objective(self, state, batch, shared, hp, ctx):
        output = ctx.forward(state["model"], batch["x"]) + ctx.call("gate", state["gate"],
                                                                     batch["x"])
        return ctx.loss(output, batch)


def test_modules_are_built_seeded_into_the_server_state_and_callable(line_ctx, clients,
                                                                    federate):
    # Prepare
    data = clients([(1, 1)], [(2, 0)])
    rng_before = torch.get_rng_state()

    # Execute
    first = federate(_toy(Gated), line_ctx, data, {"w": [0.0]}, rounds=1)
    second = federate(_toy(Gated), line_ctx, data, {"w": [0.0]}, rounds=1)
    other = federate(_toy(Gated), line_ctx, data, {"w": [0.0]}, rounds=1, seed=1)

    # Assert: the gate starts from the seed's parameters, trains, and the global RNG is untouched
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert set(first.server["gate"]) == {"weight", "bias"}
    assert torch.equal(first.state["gate"]["weight"], second.state["gate"]["weight"])
    assert not torch.equal(first.state["gate"]["weight"], other.state["gate"]["weight"])
    assert not torch.equal(first.state["gate"]["weight"][0], first.state["gate"]["weight"][1])


class AdamPhase(Algorithm):
    """FedAvg whose one phase steps by Adam, whatever the federation's optimizer."""

    def phases(self):
        return (Phase(optimizer="adam"),)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_a_phase_can_step_by_its_own_optimizer(line_ctx, clients, federate, trainer):
    # Prepare: client (1, 1), w = 0, lr 0.1, one step, the federation's optimizer plain SGD.
    # Gradient 2(0 − 1) = −2. SGD would move w to 0.2; Adam's first step is lr·m̂/(√v̂ + ε) =
    # 0.1·(−2)/(2 + 1e-8) in size, so w = 0.1 (to 1e-8).
    algorithm = AdamPhase(None, head=frozenset(), lr=0.1, local_epochs=1)

    # Execute
    result = federate(algorithm, line_ctx, clients([(1, 1)]), {"w": [0.0]}, trainer=trainer)

    # Assert
    assert result.global_params["w"].item() == pytest.approx(0.1, abs=1e-6)
