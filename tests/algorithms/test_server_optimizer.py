"""Server optimizers (Reddi et al. 2021): FedAdam and FedYogi, applied by FedAvg's server rule
(`Algorithm.server_step`) to the aggregate of any algorithm that keeps that rule.

One client with the sample (1, 1), the one-weight model ŷ = w·x, local lr 0.1 and one step per
round: a client at x trains to w = x − 0.1·2(x − 1), so Δ = w − x = 0.2·(1 − x).
Server: η = 0.1, β₁ = 0.9, β₂ = 0.99, τ = 10⁻³; m starts at 0 and v at τ² = 10⁻⁶.
"""

import pytest
import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.optim import MOMENTS, ServerOptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.storage.local_dir import LocalStore

# Round 1: Δ = 0.2, m = 0.1·0.2 = 0.02, Δ² = 0.04.
#   FedAdam: v = 0.99·10⁻⁶ + 0.01·0.04 = 0.00040099; x = 0.1·0.02/(√v + τ) = 0.0951261
#   FedYogi: v = 10⁻⁶ − 0.01·0.04·sign(10⁻⁶ − 0.04) = 0.000401;  x = 0.0951249
# Round 2 (FedAdam): w = x + 0.2(1 − x) = 0.2761008, Δ = 0.1809748, m = 0.018 + 0.0180975
#   = 0.0360975, v = 0.99·0.00040099 + 0.01·Δ² = 0.0007245; x = x + 0.1·m/(√v + τ) = 0.2244312
# Round 2 (FedYogi): Δ = 0.1809750, v = 0.000401 + 0.01·Δ² = 0.0007285 (v < Δ²: v grows by
#   (1 − β₂)Δ²); x = 0.2240856
EXPECTED = {"fedadam": (0.0951261, 0.2244312), "fedyogi": (0.0951249, 0.2240856)}


def _plan(rounds):
    return Plan(rounds=rounds, local_epochs=1, batch_size=64, lr=0.1, seed=0)


def _fedavg(name, lr=0.1, local_lr=0.1, head=frozenset()):
    optimizer = ServerOptimizerConfig(name, lr=lr, beta1=0.9, beta2=0.99, tau=1e-3)
    return FedAvg(None, head=head, lr=local_lr, local_epochs=1, server_optimizer=optimizer)


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
@pytest.mark.parametrize("name", ["fedadam", "fedyogi"])
def test_adaptive_server_optimizers_match_hand_computed_rounds(line_ctx, clients, name, trainer):
    algorithm = _fedavg(name)
    data = clients([(1, 1)])

    after = [Federation(algorithm, line_ctx, data, trainer(line_ctx), _plan(rounds))
             .run({"w": torch.tensor([0.0])}).global_params["w"].item() for rounds in (1, 2)]

    assert after == pytest.approx(EXPECTED[name], abs=1e-6)


def test_fedavg_server_optimizer_with_lr_scales_the_step(line_ctx, clients):
    # Δ = 0.2 in round 1; η = 0.5 moves the global model to 0.1
    algorithm = _fedavg("fedavg", lr=0.5)

    result = Federation(algorithm, line_ctx, clients([(1, 1)]), BatchedTrainer(line_ctx),
                        _plan(1)).run({"w": torch.tensor([0.0])})

    assert result.global_params["w"].item() == pytest.approx(0.1)


def test_server_optimizer_state_is_checkpointed_and_survives_a_resume(digits_ds3, tmp_path):
    # Prepare: FedAvg with FedYogi on ds3; 3 rounds at once, and 1 round then resumed to 3
    _, s, _ = digits_ds3
    algorithm = FedAvg(None, head=s.head, lr=0.05, local_epochs=1,
                       server_optimizer=ServerOptimizerConfig("fedyogi", lr=0.01))

    def run(rounds, where):
        plan = Plan(rounds=rounds, local_epochs=1, batch_size=16, lr=0.05, seed=0)
        return Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), plan,
                          LocalStore(tmp_path / where), "key").run(s.init)

    # Execute
    clean = run(3, "clean")
    run(1, "resumed")
    saved = torch.load(tmp_path / "resumed" / "state_0001.pt", weights_only=True)
    resumed = run(3, "resumed")

    # Assert: m and v of every key were checkpointed with the server state, and the resumed run
    # is bit-identical
    assert set(saved["server"]) == set(MOMENTS)
    assert set(saved["server"][MOMENTS[1]]) == set(s.init)
    assert all(torch.equal(clean.global_params[k], resumed.global_params[k])
               for k in clean.global_params)


def test_the_moments_are_the_servers_own(line_ctx, clients):
    # FedAdam's m and v are kept in the server state, but never reach a client: its hooks see
    # no server group, and it downloads per round what it downloads under plain FedAvg
    seen = []

    class Probe(FedAvg):
        def fresh(self, state, shared):
            seen.append(None if shared is None else sorted(shared["server"]))
            return {}

    def run(optimizer):
        algorithm = Probe(None, head=frozenset(), lr=0.1, local_epochs=1,
                          server_optimizer=optimizer)
        return Federation(algorithm, line_ctx, clients([(1, 1)]), BatchedTrainer(line_ctx),
                          _plan(2)).run({"w": torch.tensor([0.0])})

    adam, plain = run(ServerOptimizerConfig("fedadam", lr=0.1)), run(ServerOptimizerConfig())

    def received(result):
        return [row["bytes_received"] for row in result.rows if row["split"] == "train"]

    assert set(adam.server) == set(MOMENTS)
    assert received(adam) == received(plain) == [4, 4]   # the one float32 weight
    assert seen and all(groups in (None, []) for groups in seen)


def test_a_checkpoint_of_the_older_layout_resumes_with_its_moments(line_ctx, clients, tmp_path):
    # Prepare: round 1 of FedAdam checkpointed with the moments where they were kept before
    # (the snapshot's own "server_optimizer": {"m": …, "v": …}), then resumed to round 2
    algorithm, data = _fedavg("fedadam"), clients([(1, 1)])

    def run(rounds, store):
        return Federation(algorithm, line_ctx, data, BatchedTrainer(line_ctx), _plan(rounds),
                          store, "key").run({"w": torch.tensor([0.0])})

    store = LocalStore(tmp_path / "old")
    run(1, store)
    state = torch.load(tmp_path / "old" / "state_0001.pt", weights_only=True)
    state["server_optimizer"] = dict(zip("mv", (state["server"].pop(g) for g in MOMENTS),
                                         strict=True))
    torch.save(state, tmp_path / "old" / "state_0001.pt")

    # Execute
    resumed = run(2, store)

    # Assert: FedAdam's hand-computed round 2, as if never interrupted
    assert resumed.global_params["w"].item() == pytest.approx(EXPECTED["fedadam"][1], abs=1e-6)
