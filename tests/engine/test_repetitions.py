"""Repetitions as one federation: `Repeated` equals separate runs; sampling per repetition."""

import numpy as np
import pytest
import torch

from pflpipe.algorithms import REGISTRY, FedAvg
from pflpipe.data.synthetic import gaussian
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.repetitions import Repeated
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.engine.two_level import GaussianLikelihood, ScalarMean
from pflpipe.spec.algorithms import PARAMS

R, M, ROUNDS = 3, 4, 4
ENTRIES = [None, {"name": "self_fl", "min_history": 2}, {"name": "ditto", "lam": 2.0},
           {"name": "pfedme", "personal_lr": 1e-3}, {"name": "per_fedavg", "beta": 1e-3}]


def _clients(rng, repetitions):
    """Per-client observations of `repetitions` draws of the two-level Gaussian model."""
    ys = []
    for _ in range(repetitions):
        drawn = gaussian(M, rng, sigma0_sq=1.0, n_min=3, n_max=12)
        ys += [torch.from_numpy(drawn.y[drawn.groups == m]) for m in range(M)]
    return ys


def _data(ys):
    split = SplitData.from_clients([torch.ones(len(y), 1) for y in ys], ys)
    return FederatedData(split, split, split)


def _algorithm(entry):
    if entry is None:
        return FedAvg(None, head=frozenset(), lr=2e-3, local_epochs=3)
    params = PARAMS[entry["name"]].model_validate(entry)
    return REGISTRY[entry["name"]](params, head=frozenset(), lr=2e-3, local_epochs=3)


def _run(algorithm, ys, blocks=1, fraction=1.0, trainer=BatchedTrainer):
    ctx = GaussianLikelihood(ScalarMean(), sigma_sq=0.1)
    plan = Plan(rounds=ROUNDS, local_epochs=3, batch_size=12, lr=2e-3, seed=0,
                client_fraction=fraction, score_global=False, blocks=blocks)
    return Federation(algorithm, ctx, _data(ys), trainer(ctx), plan).run(
        {"theta": torch.full((1,), 0.5)})


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: "fedavg" if e is None else e["name"])
def test_repeated_equals_a_separate_run_of_each_repetition(entry):
    # Prepare: R draws of M clients; full batches, so no random order tells the runs apart
    ys = _clients(np.random.default_rng(0), R)

    # Execute
    together = _run(Repeated(_algorithm(entry), R), ys)
    alone = [_run(_algorithm(entry), ys[r * M:(r + 1) * M]) for r in range(R)]

    # Assert: each repetition's global model, clients' states and personalized models
    for r, result in enumerate(alone):
        rows = slice(r * M, (r + 1) * M)
        assert torch.allclose(together.server["global"]["theta"][r], result.global_params[
            "theta"], atol=1e-6)
        for group, tensors in result.state.items():
            for key, value in tensors.items():
                assert torch.allclose(together.state[group][key][rows], value, atol=1e-6), group
        assert torch.allclose(together.last_model["model"]["theta"][rows],
                              result.last_model["model"]["theta"], atol=1e-6)
        assert torch.allclose(together.last["val_loss"][rows], result.last["val_loss"],
                              rtol=1e-5)


def test_repeated_self_fl_batched_equals_sequential_with_sampling():
    ys = _clients(np.random.default_rng(1), R)
    algorithm = Repeated(_algorithm({"name": "self_fl"}), R)

    batched = _run(algorithm, ys, blocks=R, fraction=0.5)
    sequential = _run(algorithm, ys, blocks=R, fraction=0.5, trainer=SequentialTrainer)

    assert torch.allclose(batched.server["global"]["theta"],
                          sequential.server["global"]["theta"], atol=1e-6)
    assert torch.allclose(batched.state["model"]["theta"], sequential.state["model"]["theta"],
                          atol=1e-6)


def test_plan_blocks_samples_the_same_share_of_every_block():
    # 0.5 of each repetition's 4 clients: 2 per repetition, every round, the same for a seed
    ys = _clients(np.random.default_rng(2), R)

    first = _run(Repeated(FedAvg(None, head=frozenset(), lr=2e-3, local_epochs=3), R), ys,
                 blocks=R, fraction=0.5)
    again = _run(Repeated(FedAvg(None, head=frozenset(), lr=2e-3, local_epochs=3), R), ys,
                 blocks=R, fraction=0.5)

    trained = [[r["client"] for r in first.rows if r["split"] == "train" and r["round"] == t]
               for t in range(1, ROUNDS + 1)]
    assert all(np.bincount(np.array(c) // M, minlength=R).tolist() == [2] * R for c in trained)
    assert len({tuple(c) for c in trained}) > 1          # a new draw each round
    assert trained == [[r["client"] for r in again.rows if r["split"] == "train"
                        and r["round"] == t] for t in range(1, ROUNDS + 1)]


def test_repeated_without_blocks_in_the_plan_names_the_setting():
    ys = _clients(np.random.default_rng(3), R)

    with pytest.raises(ValueError, match=r"Plan\(blocks=3\)"):
        _run(Repeated(FedAvg(None, head=frozenset(), lr=2e-3, local_epochs=3), R), ys,
             fraction=0.5)


def test_plan_blocks_must_divide_the_clients():
    ys = _clients(np.random.default_rng(4), R)

    with pytest.raises(ValueError, match="12 clients do not split into 5 equal blocks"):
        _run(FedAvg(None, head=frozenset(), lr=2e-3, local_epochs=3), ys, blocks=5)
