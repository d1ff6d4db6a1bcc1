"""FedAvg on the engine: batched == sequential, aggregation, sampling, early stop, NaN errors."""

import json

import pytest
import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.errors import DivergenceError
from pflpipe.storage import LocalStore


def _fedavg(s, trainer_cls, plan, store=None):
    algorithm = FedAvg(None, head=s.head, lr=plan.lr, local_epochs=plan.local_epochs)
    return Federation(algorithm, s.ctx, s.data, trainer_cls(s.ctx), plan, store).run(s.init)


def test_fedavg_batched_equals_sequential_after_3_rounds_on_ds3(ds3):
    _, s = ds3
    plan = Plan(rounds=3, local_epochs=1, batch_size=16, lr=0.05, seed=0,
                optimizer=OptimizerConfig(momentum=0.9))

    batched = _fedavg(s, BatchedTrainer, plan)
    sequential = _fedavg(s, SequentialTrainer, plan)

    counts = s.data.train.counts
    assert counts.max() > 5 * counts.min()        # ds3: very unequal client sizes
    for key in s.init:
        assert torch.allclose(batched.global_params[key], sequential.global_params[key],
                              atol=1e-5), key
    assert torch.allclose(batched.last["test_accuracy"], sequential.last["test_accuracy"])


def test_fedavg_round_is_the_sample_weighted_mean_of_client_models(ds3):
    _, s = ds3
    plan = Plan(rounds=1, local_epochs=1, batch_size=16, lr=0.05, seed=0)

    result = _fedavg(s, BatchedTrainer, plan)

    weights = s.data.train.counts.float() / s.data.train.counts.sum()
    for key in s.init:
        expected = (weights.view(-1, *[1] * s.init[key].dim()) * result.state["model"][key]).sum(0)
        assert torch.allclose(result.global_params[key], expected, atol=1e-6)


def test_client_fraction_trains_only_the_sampled_clients(ds3):
    _, s = ds3
    plan = Plan(rounds=1, local_epochs=1, batch_size=16, lr=0.05, seed=0, client_fraction=0.3)

    result = _fedavg(s, BatchedTrainer, plan)

    trained = [c for c in range(10) if any(
        not torch.equal(result.state["model"][k][c], s.init[k]) for k in s.init)]
    assert len(trained) == 3
    rows = [r for r in result.rows if r["split"] == "train"]
    assert sorted(r["client"] for r in rows) == trained


def test_evaluate_matches_a_plain_loop_per_client(ds3):
    _, s = ds3
    n = s.data.n_clients
    params = {k: v.expand(n, *v.shape) + 0.01 * torch.randn(n, *v.shape, device=v.device)
              for k, v in s.init.items()}

    loss, accuracy = evaluate(s.ctx, lambda st, sh, x, ctx: ctx.forward(st["model"], x),
                              {"model": params}, {}, s.data.test, torch.arange(n), chunk=7)

    for c in range(n):
        x, y = s.data.test.client(c)
        logits = s.ctx.forward({k: v[c] for k, v in params.items()}, x)
        assert loss[c].item() == pytest.approx(
            torch.nn.functional.cross_entropy(logits, y).item(), rel=1e-5)
        assert accuracy[c].item() == pytest.approx((logits.argmax(1) == y).float().mean().item())


@pytest.mark.parametrize("positions", [7 * 2, 7 * 3, 7 * 4 + 5])
def test_evaluate_scores_the_same_bits_in_passes_of_few_members(ds3, positions):
    # passes of at most 2, 3 and 4 members of 10 (chunk 7) against all 10 in one pass
    _, s = ds3
    n = s.data.n_clients
    generator = torch.Generator().manual_seed(3)
    params = {k: v.expand(n, *v.shape) + 0.01 * torch.randn(n, *v.shape, generator=generator)
              .to(v.device) for k, v in s.init.items()}

    def scores(positions):
        return evaluate(s.ctx, lambda st, sh, x, ctx: ctx.forward(st["model"], x),
                        {"model": params}, {}, s.data.test, torch.arange(n), chunk=7,
                        positions=positions)

    (loss, accuracy), (whole_loss, whole_accuracy) = scores(positions), scores(7 * n)
    assert torch.equal(loss, whole_loss) and torch.equal(accuracy, whole_accuracy)


def test_early_stop_ends_rounds_on_a_validation_plateau(ds3, tmp_path):
    _, s = ds3
    plan = Plan(rounds=30, local_epochs=1, batch_size=16, lr=1e-6, seed=0, early_stop=(2, 0.01))

    result = _fedavg(s, BatchedTrainer, plan, LocalStore(tmp_path))

    # round 1 sets the reference loss; rounds 2 and 3 improve it by less than 0.01 → stop
    assert result.stopped_early and result.rounds_completed == 3
    assert json.loads((tmp_path / "progress.json").read_text())["stopped_early"] is True


def test_divergence_names_client_round_and_learning_rate_and_keeps_checkpoints(ds3, tmp_path):
    _, s = ds3
    store = LocalStore(tmp_path)
    plan = Plan(rounds=5, local_epochs=1, batch_size=16, lr=1e15, seed=0, keep_every_round=True)

    with pytest.raises(DivergenceError) as info:
        _fedavg(s, BatchedTrainer, plan, store)

    message = str(info.value)
    assert f"client {info.value.client}, round {info.value.round_idx}: loss became NaN" in message
    assert "learning rate 1e+15" in message and "lower it" in message
    done = json.loads((tmp_path / "progress.json").read_text())["rounds_completed"]
    assert done == info.value.round_idx - 1
    where = "round 0" if done == 0 else f"rounds 0–{done}"
    assert f"Checkpoints of {where} are intact in {store.uri}" in message
    for round_idx in range(done + 1):
        state = torch.load(tmp_path / f"round_{round_idx:04d}.pt", weights_only=True)
        assert all(torch.isfinite(v).all() for v in state.values())


def test_resume_from_a_tampered_checkpoint_is_a_data_error_naming_it(ds3, tmp_path):
    # Prepare: one finished round, then its state file replaced by a pickled object
    import pickle

    from pflpipe.errors import DataError

    _, s = ds3
    plan = Plan(rounds=2, local_epochs=1, batch_size=16, lr=0.05, seed=0)
    store = LocalStore(tmp_path / "store")
    _fedavg(s, BatchedTrainer, Plan(**{**plan.__dict__, "rounds": 1}), store)
    (tmp_path / "store" / "state_0001.pt").write_bytes(pickle.dumps(DataError("x")))

    # Execute / Assert: no unpickling, the file named with the right reason (not "damaged"), not
    # torch's weights_only advice
    with pytest.raises(DataError, match=r"store/state_0001\.pt: a plain Python pickle holding an "
                       r"object \(pflpipe\.errors\.DataError\), not a torch\.save file") as err:
        _fedavg(s, BatchedTrainer, plan, store)
    assert "weights_only" not in str(err.value)
