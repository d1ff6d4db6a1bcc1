"""Cross-device evaluation: only the round's sampled clients are scored between full sweeps."""

import torch

from pflpipe.algorithms.fedper import FedPer
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.spec.algorithms import FedPerParams


def _run(ds3, eval_clients, rounds=6, **plan):
    _, s = ds3
    algorithm = FedPer(FedPerParams(name="fedper"), head=s.head, lr=0.05, local_epochs=1)
    federation = Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), Plan(
        rounds=rounds, local_epochs=1, batch_size=16, lr=0.05, seed=0, client_fraction=0.3,
        eval_clients=eval_clients, **plan))
    return federation, federation.run(s.init)


def test_sampled_evaluation_scores_the_rounds_clients_and_full_sweeps(ds3):
    federation, result = _run(ds3, "sampled", full_eval_every=4)

    scored = {r: sorted(row["client"] for row in result.rows
                        if row["round"] == r and row["split"] == "val") for r in range(7)}

    for round_idx in (0, 4, 6):   # round 0, every 4th and the last: every client
        assert scored[round_idx] == list(range(10))
    for round_idx in (1, 2, 3, 5):   # the 3 sampled clients, the ones that trained
        assert scored[round_idx] == federation._sample(round_idx).tolist()
        trained = sorted(row["client"] for row in result.rows
                         if row["round"] == round_idx and row["split"] == "train")
        assert scored[round_idx] == trained


def test_sampled_evaluation_tracks_each_clients_best_among_its_scored_trained_rounds(ds3):
    _, result = _run(ds3, "sampled", full_eval_every=4)

    for client in range(10):
        rows = {(r["round"], r["split"]): r for r in result.rows
                if r["client"] == client and r["split"] in ("val", "test")}
        rounds = sorted({r for r, _ in rows})
        trained = [r for r in rounds if r > 0]   # round 0 (the start) is never the best
        best = min(trained, key=lambda r: (-rows[(r, "val")]["accuracy"],
                                           rows[(r, "val")]["loss"], r))
        assert int(result.best["round"][client]) == best
        assert result.best["test_accuracy"][client].item() == rows[(best, "test")]["accuracy"]
        assert int(result.last["round"][client]) == rounds[-1]
        assert result.last["val_loss"][client].item() == rows[(rounds[-1], "val")]["loss"]


def test_evaluating_all_clients_gives_the_same_training_and_more_scores(ds3):
    _, sampled = _run(ds3, "sampled", rounds=3)
    _, everyone = _run(ds3, "all", rounds=3)

    assert all(torch.equal(sampled.global_params[k], everyone.global_params[k])
               for k in sampled.global_params)
    assert torch.equal(sampled.last["test_accuracy"], everyone.last["test_accuracy"])
    assert len([r for r in everyone.rows if r["split"] == "val"]) == 4 * 10
    assert len([r for r in sampled.rows if r["split"] == "val"]) == 10 + 3 + 3 + 10
