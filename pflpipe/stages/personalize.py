"""Stage `personalize`: one personalization algorithm of the spec, run on the engine.

It starts from the warm start's checkpoint (its final model, any round's, or the seeded initial
model).
"""

import hashlib
import logging
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pflpipe import events, layout
from pflpipe.algorithms import build
from pflpipe.data.files import load_tensors
from pflpipe.engine import checkpoint
from pflpipe.engine.distributed import Recipe
from pflpipe.engine.federation import Plan
from pflpipe.errors import DataError, DivergenceError
from pflpipe.metrics.results_table import GLOBAL_SCOPE
from pflpipe.report import report_notes as notes
from pflpipe.spec.tuning import apply_tuning
from pflpipe.stages import tune
from pflpipe.tracking import NULL_TRACKER, Tracker, client_tables
from pflpipe.training import results_files, resumable_rounds, score_rows, stage_setup

log = logging.getLogger(__name__)
STAGE = "personalize"


@dataclass(frozen=True)
class PersonalizeResult:
    """Mean client test accuracy of the personalized models."""

    model: str
    rounds: int
    best_val_test_accuracy: float
    last_round_test_accuracy: float
    has_validation: bool = True
    #: (clients whose round-0 model validated better than any trained round, clients)
    started_better: tuple[int, int] = (0, 0)

    def to_markdown(self) -> str:
        """One paragraph for the KFP Markdown artifact."""
        chosen = ("with each client's model chosen on validation among its trained rounds"
                  if self.has_validation
                  else "with each client's last model (no validation split)")
        better, clients = self.started_better
        worse = (f" {better} of {clients} clients validated better at round 0, the model it "
                 "started from, than at any round it trained." if better else "")
        return (f"**{self.model}**: {self.rounds} rounds; mean client test accuracy "
                f"{self.best_val_test_accuracy:.4f} {chosen}, {self.last_round_test_accuracy:.4f}"
                f" after the last round.{worse}\n")


def run(spec, seed: int, label: str, partition_dir: Path, checkpoints_dir: Path | None,
        results_dir: Path, *, tracker: Tracker = NULL_TRACKER, stage: str = STAGE,
        progress: bool = False, resume: str = "all", shard: int | None = None,
        tuning_dir: Path | None = None) -> PersonalizeResult:
    """Run the personalization entry called `label`; write its results directory.

    With `progress`, a progress event per round (`pflpipe.events`, for `pflpipe run`).
    `resume` says which of an earlier run's checkpoints to resume from (`resumable_rounds.RESUME`).
    With `shard` = k, only the clients of the k-th of `engine.shards` client shards train (an
    entry whose clients train alone: `pflpipe.stages.merge_shards` merges the shards' directories).
    With `tuning_dir` (the `tune` stage's output), the entry runs at the setting chosen for it
    there, exactly as a spec giving that setting would run it, and keeps the tuning record.
    """
    if tuning_dir is not None:
        spec = apply_tuning(spec, label, tuning_dir)
    entry = spec.algorithm(label)
    if shard is not None and not entry.clients_train_alone:
        raise DataError(f"{label}: {entry.name}'s clients communicate, so it cannot run as a "
                        "client shard; only entries whose clients train alone are sharded (a "
                        "federated entry splits its clients over engine.workers)")
    # the Path arguments are the files its workers read (a task carries them: write_task)
    args = (spec, seed, label, Path(partition_dir), _starting_file(entry, checkpoints_dir),
            stage, shard)
    recipe = _recipe(*args)
    resumable_rounds.use_checkpoints(recipe.store, resume, recipe.plan.rounds)
    with _naming([label]):
        result = resumable_rounds.federate(spec, recipe, _recipe, args,
                                 events.round_progress(recipe.plan.rounds) if progress else None)
    return _write(spec, seed, label, recipe, result, Path(results_dir), tracker, shard,
                  tuning_dir)


def run_members(spec, seeds: list[int], label: str, partition_dirs: list[Path],
                checkpoints_dirs: list[Path] | None, results_dirs: list[Path], *,
                tracker: Tracker = NULL_TRACKER, stage: str = STAGE, progress: bool = False,
                resume: str = "all", tuning_dir: Path | None = None
                ) -> list[PersonalizeResult]:
    """`run` of every seed of `seeds`, trained as members of one federation (the same results).

    The directories are each seed's, in the order of `seeds` (`pflpipe.engine.members`).
    """
    if tuning_dir is not None:
        spec = apply_tuning(spec, label, tuning_dir)
    return run_variants([(spec, label)], seeds, partition_dirs, checkpoints_dirs,
                        [results_dirs], tracker=tracker, stage=stage, progress=progress,
                        resume=resume, tuning_dir=tuning_dir)[0]


def run_variants(runs: list[tuple], seeds: list[int], partition_dirs: list[Path],
                 checkpoints_dirs: list[Path] | None, results_dirs: list[list[Path]], *,
                 tracker: Tracker = NULL_TRACKER, stage: str = STAGE, progress: bool = False,
                 resume: str = "all", tuning_dir: Path | None = None
                 ) -> list[list[PersonalizeResult]]:
    """`run` of every (spec, label) of `runs` on every seed, all members of one federation.

    The entries are variants of one algorithm (`pflpipe.engine.variants`); each (entry, seed)
    ends with the numbers and files of its own `run`. `results_dirs[i][j]`: entry i, seed j;
    the other directories are each seed's.
    """
    from pflpipe.engine.members import combine

    recipes = [_recipe(spec, seed, label, Path(p), _starting_file(
        spec.algorithm(label), None if checkpoints_dirs is None else Path(checkpoints_dirs[j])),
        stage)
        for spec, label in runs for j, (seed, p) in enumerate(zip(seeds, partition_dirs,
                                                                   strict=True))]
    store, key = resumable_rounds.checkpoint_store(runs[0][0], stage, {
        "members": [r.fingerprint for r in recipes]})
    rounds = recipes[0].plan.rounds
    resumable_rounds.use_checkpoints(store, resume, rounds)
    federation = combine(recipes, [r.plan.seed for r in recipes], store, key,
                         events.round_progress(rounds) if progress else None,
                         [r.store for r in recipes])
    with _naming([label for _, label in runs]):
        results = iter(zip(recipes, federation.run_members(), strict=True))
    return [[_write(spec, seed, label, *next(results), Path(out), tracker, None, tuning_dir)
             for seed, out in zip(seeds, outs, strict=True)]
            for (spec, label), outs in zip(runs, results_dirs, strict=True)]


def _write(spec, seed: int, label: str, recipe: Recipe, result, results_dir: Path,
           tracker: Tracker, shard: int | None, tuning_dir: Path | None) -> PersonalizeResult:
    """Write a seed's results directory from its federation's result; track it."""
    entry, plan, data = spec.algorithm(label), recipe.plan, recipe.data
    model = entry.display_name
    results = score_rows.federation_rows(result, model, seed, data)
    history = score_rows.history_rows(score_rows.scored_rows(result.rows, data), model, seed)
    summary = PersonalizeResult(model, result.rounds_completed,
                                score_rows.mean_test_accuracy(results, "best_val"),
                                score_rows.mean_test_accuracy(results, "last_round"),
                                stage_setup.has_validation(data),
                                notes.started_better(history).get((model, seed), (0, 0)))
    models = results_files.client_models(result.best_model, data.first_client)
    results_files.write_results(Path(results_dir), results, history, models, summary.to_markdown())
    checkpoint.compact(recipe.store, [layout.model_file(results_dir, name) for name in models])
    if shard is not None:
        results_files.write_shard(Path(results_dir), data, summary)
    if tuning_dir is not None:
        tune.keep_record(tuning_dir, label, results_dir)
    tracker.log_params({"algorithm": entry.name, "seed": seed, "rounds": plan.rounds,
                        **{k: v for k, v in entry.model_dump(mode="json").items()
                           if v is not None and k != "name"}})
    tracker.log_metrics({"best_val.test_accuracy": summary.best_val_test_accuracy,
                         "last_round.test_accuracy": summary.last_round_test_accuracy,
                         **_global_means(results)})
    client_tables.log_clients(tracker, results, history,
                       models=models if spec.tracking.log_models else None)
    return summary


@contextmanager
def _naming(labels: list[str]):
    """Name the entry (or entries) in a DivergenceError raised inside."""
    try:
        yield
    except DivergenceError as err:
        named = ", ".join(repr(label) for label in dict.fromkeys(labels))
        raise DivergenceError(f"entry {named}, {err}", err.client, err.round_idx) from err


def _recipe(spec, seed: int, label: str, partition_dir: Path, start: Path | None, stage: str,
            shard: int | None = None) -> Recipe:
    """The entry's federation from the `start` checkpoint (None: the seeded initial model).

    Its workers build it again from the same arguments.
    """
    entry = spec.algorithm(label)
    s = stage_setup.setup(spec, seed, partition_dir, shard)
    init = s.init if start is None else load_tensors(
        start, f"the warm start's state_dict {start.name}", map_location=s.device)
    fed = spec.federation
    algorithm = build(entry, head=s.head, federation=fed)
    rounds = entry.rounds_of(fed)
    plan = Plan(
        rounds=rounds.rounds, local_epochs=rounds.local_epochs,
        batch_size=entry.batch_size or fed.batch_size, lr=algorithm.lr, seed=seed,
        client_fraction=rounds.client_fraction, **stage_setup.plan_settings(spec),
        eval_every=entry.eval_every, stream=stream_of(label), best_on_val=s.has_validation,
        score_global=algorithm.has_global_model)
    store, key = resumable_rounds.checkpoint_store(spec, stage, {
        "seed": seed, "partition": s.partition_hash, "entry": entry.model_dump(mode="json"),
        "plan": repr(plan), "server_optimizer": repr(algorithm.server_optimizer),
        "init": _digest(init), **stage_setup.engine_key(spec, s),
        **({} if shard is None else {"clients": [s.data.first_client, s.data.n_clients]})})
    return Recipe(algorithm, s.ctx, s.data, s.trainer, plan, store, key, init)


def stream_of(label: str) -> int:
    """The random stream of an entry: from its label, not its position in the spec's list.

    The label, not the algorithm and its parameters: a stream from the parameters would move
    with any parameter (an lr 0.1 % higher retrains on another stream just the same), and one
    from the algorithm alone would give two entries of one algorithm the same mini-batches, which
    hides the training noise between them instead of measuring it; either would change every
    existing result. A renamed entry is a new stream; the spec reference says so (`label`).
    """
    return 1 + zlib.crc32(label.encode())


def _starting_file(entry, checkpoints_dir: Path | None) -> Path | None:
    """The warm-start checkpoint `entry` starts from (None: the seeded initial model)."""
    warm = entry.warm_start
    if warm == "none":
        return None
    if checkpoints_dir is None:
        raise DataError(f"{entry.display_name}: warm_start is {warm!r} but no warm-start "
                        "checkpoints were given")
    progress = layout.read_progress(checkpoints_dir)
    if progress is None:
        raise DataError(f"{checkpoints_dir} holds no warm-start checkpoints (no "
                        f"{layout.PROGRESS_JSON})")
    last = progress["rounds_completed"]
    round_idx = last if warm == "final" else warm
    if round_idx > last:
        raise DataError(f"{entry.display_name}: warm_start round {round_idx} does not exist; the "
                        f"warm start ran {last} rounds")
    return layout.round_file(checkpoints_dir, round_idx)


def _digest(params) -> str:
    digest = hashlib.sha256()
    for key in sorted(params):
        digest.update(key.encode())
        digest.update(params[key].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _global_means(results: list[dict]) -> dict[str, float]:
    """Mean client test accuracy of the global model (GA) and % of clients whose PA beats it."""
    from pflpipe.metrics.generalization import BEATS_GLOBAL, personalization_gain

    if not any(r["scope"] == GLOBAL_SCOPE for r in results):
        return {}
    out = {}
    for selection in ("best_val", "last_round"):
        pa, ga = (score_rows.client_test_accuracies(results, selection, scope)
                  for scope in ("", GLOBAL_SCOPE))
        out[f"{selection}.global.test_accuracy"] = sum(ga) / len(ga)
        out[f"{selection}.beats_global"] = BEATS_GLOBAL(personalization_gain(pa, ga))
    return out
