"""Stage `warm_start_fedavg`: FedAvg from the seeded initial model.

It keeps every round's global model and every round's per-client validation and test scores (the
input of teacher selection). Checkpoints go to the spec's storage as they are made, so a killed run
resumes.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pflpipe import events, layout
from pflpipe.algorithms import FedAvg
from pflpipe.engine import checkpoint
from pflpipe.engine.distributed import Recipe
from pflpipe.engine.federation import Plan
from pflpipe.engine.optim import ServerOptimizerConfig
from pflpipe.errors import DataError
from pflpipe.tracking import NULL_TRACKER, Tracker
from pflpipe.tracking import results_logging as track_results
from pflpipe.training import csv_tables, results_files, resumable_rounds, score_rows, stage_setup

log = logging.getLogger(__name__)
MODEL = "fedavg"
METRIC_FIELDS = ("round", "client", "split", "loss", "accuracy", "n_samples")


@dataclass(frozen=True)
class WarmStartResult:
    """Rounds run, the round chosen on validation and the final scores."""

    rounds_completed: int
    stopped_early: bool
    best_round: int
    test_accuracy: float        # mean over clients, final global model
    best_test_accuracy: float   # mean over clients, global model of the best-val round
    store: str
    has_validation: bool = True

    def to_markdown(self) -> str:
        """One paragraph for the KFP Markdown artifact."""
        stop = " (stopped early on a validation plateau)" if self.stopped_early else ""
        rule = ("best mean validation accuracy" if self.has_validation
                else "no validation split: the last round")
        return (f"**warm_start_fedavg**: {self.rounds_completed} rounds{stop}; mean client test "
                f"accuracy {self.test_accuracy:.4f} after the last round, "
                f"{self.best_test_accuracy:.4f} at round {self.best_round} ({rule}). Every "
                f"round's global model is kept in {self.store}.\n")


def run(spec, seed: int, partition_dir: Path, checkpoints_dir: Path, results_dir: Path, *,
        tracker: Tracker = NULL_TRACKER,
        on_round: Callable[[int, list[dict]], None] | None = None,
        progress: bool = False, resume: str = "all") -> WarmStartResult:
    """Run (or resume) FedAvg; write the checkpoint and results directories.

    With `progress` (and no `on_round`), a progress event per round (`pflpipe.events`).
    `resume` says which of an earlier run's checkpoints to resume from (`resumable_rounds.RESUME`).
    """
    recipe = _recipe(spec, seed, partition_dir)
    resumable_rounds.use_checkpoints(recipe.store, resume, spec.federation.rounds)
    if progress and on_round is None:
        on_round = events.round_progress(spec.federation.rounds)
    result = resumable_rounds.federate(spec, recipe, _recipe, (spec, seed, Path(partition_dir)),
                                       on_round)
    return _write(spec, seed, recipe.data, recipe.store, result, Path(partition_dir),
                  Path(checkpoints_dir), Path(results_dir), tracker)


def run_members(spec, seeds: list[int], partition_dirs: list[Path],
                checkpoints_dirs: list[Path], results_dirs: list[Path], *,
                tracker: Tracker = NULL_TRACKER, progress: bool = False,
                resume: str = "all") -> list[WarmStartResult]:
    """`run` of every seed of `seeds`, trained as members of one federation (the same results).

    The directories are each seed's, in the order of `seeds` (`pflpipe.engine.members`).
    """
    from pflpipe.engine.members import combine

    recipes = [_recipe(spec, seed, Path(p)) for seed, p in zip(seeds, partition_dirs,
                                                                strict=True)]
    store, key = resumable_rounds.checkpoint_store(spec, "warm_start_fedavg", {
        "members": [r.fingerprint for r in recipes]})
    resumable_rounds.use_checkpoints(store, resume, spec.federation.rounds)
    on_round = events.round_progress(spec.federation.rounds) if progress else None
    results = combine(recipes, seeds, store, key, on_round,
                      [r.store for r in recipes]).run_members()
    return [_write(spec, seed, recipe.data, recipe.store, result, Path(p), Path(c), Path(r),
                   tracker)
            for seed, recipe, result, p, c, r in zip(
                seeds, recipes, results, partition_dirs, checkpoints_dirs, results_dirs,
                strict=True)]


def _write(spec, seed: int, data, store, result, partition_dir: Path, checkpoints_dir: Path,
           results_dir: Path, tracker: Tracker) -> WarmStartResult:
    """Write a seed's checkpoint and results directories from its federation's result."""
    rows = score_rows.scored_rows(result.rows, data)
    _write_checkpoints(store, Path(checkpoints_dir), rows, data)
    results, best_round = _global_results(rows, result.rounds_completed, seed, data)
    history = score_rows.history_rows(rows, MODEL, seed)
    summary = WarmStartResult(
        result.rounds_completed, result.stopped_early, best_round,
        score_rows.mean_test_accuracy(results, "last_round"),
        score_rows.mean_test_accuracy(results, "best_val"), store.uri,
        stage_setup.has_validation(data))
    results_files.write_results(Path(results_dir), results, history, {
        "global": result.global_params,
        layout.GLOBAL_BEST_VAL: resumable_rounds.load_round(checkpoints_dir, best_round,
                                                  data.train.x.device)},
        summary.to_markdown())
    checkpoint.compact(store)   # its results hold no client models: the best ones stay in it
    track_results.track_model(tracker, spec, seed, results_dir, partition_dir)
    return summary


def _recipe(spec, seed: int, partition_dir: Path) -> Recipe:
    """The warm start's federation (its workers build it again from the same arguments)."""
    s = stage_setup.setup(spec, seed, partition_dir)
    fed = spec.federation
    if fed.early_stop and not s.has_validation:
        raise DataError("federation.early_stop stops on the validation loss, but the partition "
                        "has no validation split; remove early_stop, or give the clients "
                        "validation rows (partition.val_from_train for a predefined split)")
    plan = Plan(rounds=fed.rounds, local_epochs=fed.local_epochs, batch_size=fed.batch_size,
                lr=fed.lr, seed=seed, client_fraction=fed.client_fraction,
                **stage_setup.plan_settings(spec),
                early_stop=(fed.early_stop.patience, fed.early_stop.min_delta)
                if fed.early_stop else None, keep_every_round=True, stream=0,
                best_on_val=s.has_validation,
                score_global=False)  # FedAvg's personalized model is its global model
    store, key = resumable_rounds.checkpoint_store(spec, "warm_start_fedavg", {
        "seed": seed, "partition": s.partition_hash, "federation": fed.model_dump(mode="json"),
        **stage_setup.engine_key(spec, s)})
    algorithm = FedAvg(None, head=s.head, lr=fed.lr, local_epochs=fed.local_epochs,
                       server_optimizer=ServerOptimizerConfig.from_spec(fed.server_optimizer))
    return Recipe(algorithm, s.ctx, s.data, s.trainer, plan, store, key, s.init)


def _write_checkpoints(store, out_dir: Path, rows: list[dict], data) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for key in store.list():
        if layout.round_of(key) is not None or key == layout.PROGRESS_JSON:
            (out_dir / key).write_bytes(store.get_bytes(key))
    rows = [{**row, "n_samples": data.split(row["split"]).counts[row["client"]].item()}
            for row in rows if row["split"] in ("val", "test")]
    csv_tables.write_csv(out_dir / layout.ROUND_METRICS_CSV, METRIC_FIELDS, rows)


def _global_results(rows: list[dict], last: int, seed: int, data) -> tuple[list[dict], int]:
    """The global model's results; it is one model, so it has one best-val round.

    Its best-val round is the round with the best sample-weighted mean validation accuracy (ties:
    lower mean loss, then the earlier round) among the trained rounds (≥ 1) that scored every
    client; without a validation split (or a trained round), the last round.
    """
    best = last
    if stage_setup.has_validation(data):
        scored: dict[int, int] = {}
        for row in rows:
            if row["split"] == "val":
                scored[row["round"]] = scored.get(row["round"], 0) + 1
        full = [r for r in rows if scored.get(r["round"]) == data.n_clients
                and (r["round"] > 0 or last == 0)]
        accuracy = score_rows.mean_by_round(full, "val", "accuracy", data)
        loss = score_rows.mean_by_round(full, "val", "loss", data)
        best = min(accuracy, key=lambda r: (-accuracy[r], loss[r], r))
    index = {(r["round"], r["client"], r["split"]): r for r in rows}
    out = []
    for selection, round_idx in (("best_val", best), ("last_round", last)):
        for split in stage_setup.scored_splits(data):
            counts = data.split(split).counts.tolist()
            for client in range(data.n_clients):
                row = index[(round_idx, client, split)]
                out.append({"seed": seed, "client": client, "model": MODEL, "split": split,
                            "selection": selection, "round": round_idx,
                            "accuracy": row["accuracy"], "loss": row["loss"],
                            "n_samples": counts[client]})
    return out, best


