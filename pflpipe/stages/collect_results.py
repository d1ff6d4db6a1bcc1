"""Stage `collect_results`: gather one seed's results directories into one results directory.

The pipeline trains the personalize algorithms in a loop nested in the seeds loop. KFP fans in one
loop level at a time, so each seed's results meet here and `evaluate_fairness` reads one directory
per seed. The output is itself a results directory (docs/contracts.md):

```
results.csv       the rows of every input's results.csv
collected.json    {"seed": 0, "models": ["fedavg", "local", ...]}
<model>/          each input directory as it was (results.csv, history.csv, models/, ...), a
                  model's client shards merged into one (`pflpipe.stages.merge_shards`)
partition/        the partition's manifest.json and label heatmap (not its samples)
sources.json      where the partition and the warm start's checkpoints are, and the hash of
                  the spec sections that made them (`Spec.warm_start_hash`)
                  (`pflpipe personalize-new` reads them from there)
```

The training stages are cached and take no MLflow run id, so `track` logs each of them into
the pipeline's parent run (`pflpipe.tracking.results_logging`) and tags the parent with the
partition's content hash; in the pipeline `evaluate_fairness` calls it for every seed, and this
stage's task tracks nothing.
"""

import csv
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from pflpipe import layout, markdown
from pflpipe.errors import DataError
from pflpipe.layout import SHARD_JSON
from pflpipe.storage import upload_results
from pflpipe.tracking import NULL_TRACKER, Tracker

RESULTS, MANIFEST, SOURCES = layout.RESULTS_CSV, layout.COLLECTED_JSON, layout.SOURCES_JSON
#: What of the partition directory is kept with the results (the samples are not).
PARTITION_FILES = (layout.MANIFEST_JSON, layout.HEATMAP_PNG)


@dataclass(frozen=True)
class CollectedResults:
    """The models of one seed and their mean client test score (accuracy, or MSE)."""

    seed: int
    selection: str
    test_accuracy: dict[str, float]   # model -> mean over clients (spec's evaluation.selection)
    score: str = "accuracy"           # "accuracy", or "mse" for a regression

    def metrics(self) -> dict[str, float]:
        """Return ``{model}.test_{score}`` for each model with a finite value (KFP Metrics)."""
        return {f"{model}.test_{self.score}": value for model, value in self.test_accuracy.items()
                if math.isfinite(value)}

    def to_markdown(self) -> str:
        """Return one line per model: its mean client test score."""
        name = "accuracy" if self.score == "accuracy" else "MSE"
        lines = [f"**collect_results** (seed {self.seed}): mean client test {name}, each "
                 f"client's model chosen by {self.selection}", "",
                 *markdown.table(["model", f"test {name}"],
                                 [[model, f"{value:.4f}"]
                                  for model, value in self.test_accuracy.items()], "lr")]
        return "\n".join(lines) + "\n"


def run(spec, seed: int, results_dirs: list[Path], out_dir: Path, *,
        partition_dir: Path | None = None, checkpoints_dir: Path | None = None,
        tracker: Tracker = NULL_TRACKER) -> CollectedResults:
    """Link each directory into `out_dir/<model>/` (`layout.link_tree`), write the results; track.

    The client shards of a model (`engine.shards`) are merged into `out_dir/<model>/` first.
    `tracker` is the parent run: each model gets its runs under it (see `track_results`).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    models: list[str] = []
    fields: list[str] = []
    for directory in _merge_shards(list(map(Path, results_dirs)), out):
        table, columns = _read(directory)
        fields += [name for name in columns if name not in fields]
        model = table[0]["model"]
        if model in models:
            raise DataError(f"two results directories hold model {model!r} for seed {seed} "
                            f"(the second is {directory}); every model is trained once per seed")
        if directory != out / model:
            layout.link_tree(directory, out / model)
        rows += table
        models.append(model)
    with (out / RESULTS).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    (out / MANIFEST).write_text(json.dumps({"seed": seed, "models": models}, indent=2) + "\n")
    from pflpipe.spec.dataset import task_of

    selection = spec.evaluation.selection
    score = "mse" if task_of(spec.dataset) == "regression" else "accuracy"
    column = "loss" if score == "mse" else "accuracy"
    result = CollectedResults(seed, selection, {m: _mean(rows, m, selection, column)
                                                for m in models}, score)
    if partition_dir is not None:
        _keep_sources(out, Path(partition_dir), checkpoints_dir, spec.warm_start_hash())
        track(spec, out, tracker)
    upload_results(spec, out, layout.seed_folder(seed))
    return result


def track(spec, out_dir: Path, tracker: Tracker) -> None:
    """Log a collected seed into the parent run `tracker`: its partition hash, every model."""
    if tracker is NULL_TRACKER:
        return
    from pflpipe.tracking import results_logging as track_results

    out = Path(out_dir)
    collected = json.loads((out / MANIFEST).read_text())
    manifest = json.loads((out / layout.PARTITION / layout.MANIFEST_JSON).read_text())
    tracker.set_tags({f"partition_hash.seed-{collected['seed']}": manifest["content_hash"]})
    for model in reversed(collected["models"]):  # the runs table lists the newest first
        track_results.track_model(tracker, spec, collected["seed"], out / model,
                                  out / layout.PARTITION)


def _keep_sources(out: Path, partition_dir: Path, checkpoints_dir: Path | None,
                  warm_start_hash: str) -> None:
    (out / layout.PARTITION).mkdir(exist_ok=True)
    for name in PARTITION_FILES:
        if (partition_dir / name).is_file():
            shutil.copyfile(partition_dir / name, out / layout.PARTITION / name)
    sources = {"partition": str(partition_dir.absolute()),
               "checkpoints": str(Path(checkpoints_dir).absolute()) if checkpoints_dir else None,
               "warm_start_hash": warm_start_hash}
    (out / SOURCES).write_text(json.dumps(sources, indent=2) + "\n")


def _merge_shards(results_dirs: list[Path], out: Path) -> list[Path]:
    """`results_dirs` with each model's client shards merged into `out/<model>/`, in order.

    A personalize entry whose clients train alone runs as one task per client shard; its
    directories hold `SHARD_JSON` (`pflpipe.stages.merge_shards`).
    """
    dirs: list[Path] = []
    parts: dict[str, list[Path]] = {}
    for directory in results_dirs:
        if not (directory / SHARD_JSON).is_file():
            dirs.append(directory)
            continue
        model = _read(directory)[0][0]["model"]
        if model not in parts:
            parts[model] = []
            dirs.append(out / model)
        parts[model].append(directory)
    if parts:
        from pflpipe.stages import merge_shards

        for model, shard_dirs in parts.items():
            merge_shards.run(shard_dirs, out / model)
    return dirs


def _read(directory: Path) -> tuple[list[dict], list[str]]:
    path = directory / RESULTS
    if not path.is_file():
        raise DataError(f"{directory} holds no {RESULTS}; every training stage writes one")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        table = list(reader)
        columns = list(reader.fieldnames or [])
    models = sorted({row.get("model", "") for row in table})
    if len(models) != 1 or not models[0]:
        raise DataError(f"{path} holds {len(models)} models ({', '.join(models) or 'none'}); a "
                        "training stage's results directory holds exactly one")
    return table, columns


def _mean(rows: list[dict], model: str, selection: str, column: str) -> float:
    values = [float(r[column]) for r in rows
              if r["model"] == model and r["split"] == "test" and r["selection"] == selection
              and not r.get("scope")]   # the personalized model's rows, not GA's
    return sum(values) / len(values) if values else float("nan")
