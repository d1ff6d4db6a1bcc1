"""Stage `evaluate_fairness`: evaluate every training stage's results table; write the report.

Concatenates the `results.csv` of each results directory, evaluates it with the spec's
`evaluation` settings (baselines, selection, metrics) and writes report.json, report.md,
report.html and figures/*.png into the output directory (see `pflpipe.report.report_writer`). A
results directory of `collect_results` (one seed) also gives the report its curves, pictures and
links (`context`).
"""

import json
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pflpipe import layout
from pflpipe.beside import Beside
from pflpipe.compute import in_all
from pflpipe.errors import DataError
from pflpipe.events import notice, warning
from pflpipe.storage import upload_results
from pflpipe.tracking import NULL_TRACKER, Tracker
from pflpipe.training.csv_tables import read_csv

if TYPE_CHECKING:
    from pflpipe.report.report_cache import ReportCache

log = logging.getLogger(__name__)
RESULTS = layout.RESULTS_CSV
#: Pictures of the first seed shown in the report: (directory, file) → caption.
PICTURES = {
    (layout.PARTITION, layout.HEATMAP_PNG): "The split: samples per client and class (first "
    "seed; the other seeds' are in their seed-N/partition/).",
    ("persfl", layout.TEACHER_ROUNDS_PNG): "PersFL: each client's optimal teacher round, chosen on "
    "its validation loss (thesis Fig. 6.1; first seed).",
    ("persfl", layout.LAMBDA_T_PNG): "PersFL: test accuracy of every (λ, T) student per client, "
    "the chosen pair ringed (thesis Figs. 6.2-6.7; first seed).",
}


@dataclass(frozen=True)
class ReportResult:
    """What evaluate_fairness wrote, and the answers per split.

    `best` and `fairest` name a model per split only where the corrected paired test resolves
    it (`pflpipe.metrics.pairwise`); None where models are tied at the top or undecided.
    """

    out_dir: Path
    files: tuple[Path, ...]
    best: dict[str, str | None]
    fairest: dict[str, str | None]
    answers: str
    markdown: str
    #: Each seed's collected results directory: the pipeline's output names them (as its report
    #: artifact's metadata ``seed_dirs``), so no one globs the runner's layout to find them.
    seed_dirs: dict[int, Path] = field(default_factory=dict)

    def to_markdown(self) -> str:
        """Return report.md (the KFP Markdown artifact)."""
        return self.markdown


def results_tables(results_dirs: list[Path]) -> list[Path]:
    """Return each directory's results table; raise `DataError` naming a directory without one."""
    paths = [Path(directory) / RESULTS for directory in results_dirs]
    missing = [str(path.parent) for path in paths if not path.is_file()]
    if missing:
        raise DataError(f"no {RESULTS} in results director{'y' if len(missing) == 1 else 'ies'} "
                        f"{', '.join(missing)}; every training stage writes one")
    return paths


def run(spec, results_dirs: list[Path], out_dir: Path, *, tracker: Tracker = NULL_TRACKER,
        run_info: dict[str, str] | None = None,
        alongside: Callable[[], None] | None = None,
        cache: "ReportCache | None" = None) -> ReportResult:
    """Evaluate the results of `results_dirs` and write the fairness report into `out_dir`.

    `run_info` is shown first in the report (spec hash, MLflow run, ...). `alongside` (the
    pipeline's tracking of every seed) runs while another process draws the report
    (`_write_beside`); the report is then logged on `tracker`. `cache` keeps the figures for a
    rerun on the same inputs and gives them back to it (`pflpipe.report.report_cache`).
    """
    from pflpipe.report.report_writer import build_report
    from pflpipe.report.results_reader import read_table
    from pflpipe.spec.dataset import task_of

    evaluation = spec.evaluation
    unit = "neg_mse" if task_of(spec.dataset) == "regression" else "fraction"
    table = read_table(results_tables(results_dirs), unit=unit)
    tables = _copy_tables(list(map(Path, results_dirs)), Path(out_dir))
    if len(tables) == len(results_dirs):  # name the copies the report links, not the runner's
        table = replace(table, sources=tuple(str(p.relative_to(out_dir)) for p in tables))
    report = build_report(table, local=evaluation.baselines.local,
                          global_=evaluation.baselines.global_, selection=evaluation.selection,
                          metrics=tuple(evaluation.metrics), validation="val" in table.splits,
                          context=context(spec, list(map(Path, results_dirs)), run_info or {},
                                          sorted({row.seed for row in table.rows})))
    kept = cache.figures() if cache else None
    if kept is not None:
        notice("figures reused from an earlier run of the same inputs")
    if alongside is None or kept is not None:   # nothing to draw beside: all here
        if alongside is not None:
            alongside()
        files = _draw(report, Path(out_dir), cache, kept)
    else:
        files = _write_beside(report, Path(out_dir), alongside, cache)
    log.info("evaluate_fairness: %s", report.answers())
    from pflpipe.report.stability_section import said

    for found in report.stability.values():
        if (sentence := said(found, report.primary.split, report.unit)):
            warning(sentence)
    unequal = report.unequal_compute()
    if unequal:   # said once: a gap by design is a note, one the settings make a warning
        (notice if unequal.by_design else warning)(unequal.line or unequal.text)
    tracker.log_params({"evaluation.selection": evaluation.selection,
                        "evaluation.baselines.local": evaluation.baselines.local,
                        "evaluation.baselines.global": evaluation.baselines.global_,
                        "evaluation.unit": report.unit})
    tracker.log_metrics(tracked_metrics(report))
    tracker.set_tags(verdict_tags(report))
    for path in (files.json, files.markdown, files.html, files.pairwise):
        tracker.log_artifact(path, "report")
    tracker.log_artifact(files.out_dir / "figures", "report/figures")
    if tables:
        tracker.log_artifact(files.out_dir / layout.REPORT_TABLES,
                             f"report/{layout.REPORT_TABLES}")
    for directory in map(Path, results_dirs):  # each seed's table beside its run's report
        seed = _seed_of(directory)
        if seed is not None:
            tracker.log_artifact(directory / RESULTS, layout.seed_folder(seed))
    upload_results(spec, files.out_dir, "report")
    return ReportResult(
        out_dir=files.out_dir, files=(files.json, files.markdown, files.html, *files.figures),
        best={s: a.best.winner for s, a in report.uncertainty.items()},
        fairest={s: a.fairest.winner for s, a in report.uncertainty.items()},
        answers=report.answers(), markdown=files.markdown.read_text(encoding="utf-8"),
        seed_dirs={seed: Path(d) for d in results_dirs if (seed := _seed_of(d)) is not None},
    )


def run_in_pipeline(spec, results_dirs: list[Path], out_dir: Path, *, tracking_uri: str,
                    experiment: str, parent_run_id: str, kfp_run_id: str = "",
                    sweep_point: str = "") -> ReportResult:
    """`run` as the pipeline's last task: into the given parent run, or one it opens.

    The training stages are cached and take no run id, and `collect_results` tracks nothing (so
    that neither mlflow nor torch is imported by a task per seed), so this task logs every seed's
    results (`collect_results.track`), then the report. With no parent run id (a pipeline
    uploaded and started in the KFP UI) and a tracking URI (the pipeline parameter, the spec's or
    $MLFLOW_TRACKING_URI), it opens the parent run (tagged ``kfp_run_id``) and finishes it.
    A sweep's point (`sweep_point`: its label and overrides as JSON) logs into a child run of
    its own under that parent (`pflpipe.tracking.sweep_runs.point_run`).
    """
    from pflpipe.report.report_cache import SEEDS_RUN_TAG, open_cache
    from pflpipe.stages import collect_results
    from pflpipe.tracking import open_parent_run, parent_tracker

    opened = None
    known_uri = tracking_uri or spec.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not parent_run_id and spec.tracking.enabled and known_uri:
        opened = open_parent_run(spec, tracking_uri=tracking_uri or None,
                                 experiment=experiment or None, tags={"kfp_run_id": kfp_run_id})
        tracker, parent_run_id = opened.tracker(), opened.run_id
    else:
        tracker = parent_tracker(spec.tracking, tracking_uri, parent_run_id, experiment)
    info = {"MLflow run": f"{parent_run_id} in experiment {experiment!r}"} if parent_run_id \
        else {}
    info |= {"KFP run": kfp_run_id} if kfp_run_id else {}
    cache = open_cache(spec, results_dirs)
    try:
        with _point(tracker, sweep_point, results_dirs) as tracker:
            def track_seeds() -> None:
                earlier = cache.logged_run(tracker) if cache else None
                if earlier:   # its child runs hold these very seeds, clients and models
                    tracker.set_tags({SEEDS_RUN_TAG: earlier})
                    notice(f"seeds' runs and models: MLflow run {earlier}'s (same inputs; tag "
                           f"{SEEDS_RUN_TAG})")
                    return
                for directory in results_dirs:
                    collect_results.track(spec, Path(directory), tracker)
                if cache:
                    cache.keep_logged(tracker)

            result = run(spec, results_dirs, out_dir, tracker=tracker, run_info=info,
                         alongside=None if tracker is NULL_TRACKER else track_seeds, cache=cache)
    except BaseException:
        if opened:
            opened.finish("FAILED")
        raise
    if opened:
        opened.finish()
    return result


def _point(tracker: Tracker, sweep_point: str, results_dirs: list[Path]):
    """The point's child run under `tracker` for a sweep's point, else `tracker` itself."""
    from contextlib import nullcontext

    from pflpipe.tracking.sweep_runs import point_run

    if not sweep_point:
        return nullcontext(tracker)
    point = json.loads(sweep_point)
    manifests = [path for d in results_dirs
                 if (path := Path(d) / layout.PARTITION / layout.MANIFEST_JSON).is_file()]
    return point_run(tracker, point["label"], point["overrides"], manifests)


def _copy_tables(results_dirs: list[Path], out_dir: Path) -> list[Path]:
    """Copy each seed's results table into the report directory, where its link points."""
    import shutil

    copies = []
    for directory in results_dirs:
        if (seed := _seed_of(directory)) is not None:
            copy = out_dir / layout.report_table(seed)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copies.append(Path(shutil.copyfile(directory / RESULTS, copy)))
    return copies


def _write_beside(report, out_dir: Path, alongside: Callable[[], None], cache=None):
    """`write_report(report, out_dir)` in a forked process while `alongside()` runs here.

    Drawing the figures (matplotlib) and tracking the seeds (mlflow, torch) share nothing and
    take seconds each, and kfp.local runs this task alone: the second core would idle
    (`pflpipe.beside`). The child inherits the report and writes the same files; its
    failure is raised here once `alongside` is done.
    """
    with Beside(_draw, args=(report, out_dir, cache), name="evaluate_fairness figures") as drawing:
        alongside()   # a failure here is raised once the child ended (`Beside.close`)
        return drawing.result()


def _draw(report, out_dir: Path, cache=None, kept=None):
    """Write the report with the `kept` figures, else drawn now (and kept in `cache`)."""
    from pflpipe.report.report_writer import draw_figures, write_report

    if kept is None:
        kept = draw_figures(report)
        if cache is not None:
            cache.keep_figures(*kept)
    return write_report(report, out_dir, kept)


def context(spec, results_dirs: list[Path], run_info: dict[str, str],
            reported_seeds: list[int] | None = None):
    """The report's context from one `collect_results` directory per seed.

    Curves from every model's history.csv, the first seed's pictures, and a link to each seed's
    table as copied into the report directory (``tables/seed-N/results.csv``). `reported_seeds`
    are the seeds the results tables hold (the spec's experiment.seeds when not given); a tuned
    entry is shown with the setting the tune stage chose, as kept beside its results.
    """
    from pflpipe.report.report_writer import ReportContext

    seeds = {_seed_of(d): d for d in results_dirs if _seed_of(d) is not None}
    history = tuple(row for directory in seeds.values() for model in _models(directory)
                    if (directory / model / layout.HISTORY_CSV).is_file()
                    for row in read_csv(directory / model / layout.HISTORY_CSV))
    images = {}
    if seeds:
        first = seeds[min(seeds)]
        persfl = next((m for m in _models(first) if m.startswith("persfl")), "persfl")
        for (folder, name), caption in PICTURES.items():
            path = first / (persfl if folder == "persfl" else folder) / name
            if path.is_file():
                images[name] = (path.read_bytes(), caption)
    reported = list(spec.experiment.seeds if reported_seeds is None else reported_seeds)
    records = tuning_records(spec, results_dirs)
    n_clients, train_samples = _partitions(list(seeds.values()))
    plan = in_all.plan(spec, records, train_samples)
    info = {"experiment": spec.experiment.name, "spec hash": spec.content_hash(), **run_info,
            "data": f"{spec.dataset.name}, {spec.partition.strategy}, "
                    f"{n_clients or spec.partition.n_clients} clients",
            "rounds": ", ".join(plan.described.values()),
            **_seed_rows(spec, reported, records)}
    links = tuple((f"seed {s}: {RESULTS}", layout.report_table(s))
                  for s in sorted(seeds))
    chosen = tuple(name for (folder, name) in PICTURES if folder == "persfl" and name in images)
    tuned = _tuning(spec, records, reported) if records else {}
    return ReportContext(info, history, images, links, spec.evaluation.compute_mismatch, chosen,
                         tuned, plan)


def _partitions(seed_dirs: list[Path]) -> tuple[int | None, float]:
    """The seeds' partitions: the first's clients and one pass over the training rows.

    A predefined file decides the clients; the pass is every client's training rows, the mean
    over the seeds.
    """
    clients, totals = None, []
    for directory in seed_dirs:
        manifest = Path(directory) / layout.PARTITION / layout.MANIFEST_JSON
        if manifest.is_file():
            entries = json.loads(manifest.read_text())["clients"]
            clients = clients or len(entries)
            totals.append(sum(entry["n"]["train"] for entry in entries))
    return clients, sum(totals) / len(totals) if totals else 0.0


def tuning_records(spec, results_dirs: list[Path]) -> dict[str, dict]:
    """Each tuned entry's tuning record (tuning.json), kept beside its results; label → record.

    A `collect_results` directory keeps it in the entry's folder, a personalize stage's results
    directory at its top. The first seed's record is taken: every seed ran the same choice.
    """
    from pflpipe.spec.tuning import read_tuning

    if spec.tuning is None:
        return {}
    found: dict[str, dict] = {}
    for directory in map(Path, results_dirs):
        kept = ([directory / m for m in _models(directory)] if _seed_of(directory) is not None
                else [directory])
        for folder in kept:
            if (folder / layout.TUNING_JSON).is_file():
                record = read_tuning(folder)
                for label in record["entries"]:
                    if spec.tuning.find(label):
                        found.setdefault(label, record)
    return found


def _seed_rows(spec, reported: list[int], records: dict[str, dict]) -> dict[str, str]:
    """The run's seeds: those reported, and those that only chose the tuned settings."""
    rows = {"reported seeds": f"{', '.join(map(str, reported))} (every table and figure below "
                              "is over these seeds)"}
    if spec.tuning:
        seeds = ", ".join(map(str, _tuning_seeds(spec, records)))
        rows["tuning seeds"] = (f"{seeds} (chose the tuned entries' settings on their validation "
                                "splits; never reported)" if records else
                                f"{seeds} (the spec's; these results hold no tuning record)")
    return rows


def _tuning_seeds(spec, records: dict[str, dict]) -> list[int]:
    """The seeds the settings were chosen on: the tune stage's record's, else the spec's."""
    return next(iter(records.values()), {}).get("seeds", spec.tuning.seeds)


def _tuning(spec, records: dict[str, dict], reported: list[int]) -> dict:
    """The report's tuning facts: each tuned entry's record (kept with its results), the rest."""
    from pflpipe.spec.tuning import unequal_tuning

    first = next(iter(records.values()), {})
    return {"seeds": _tuning_seeds(spec, records), "reported_seeds": reported,
            "selection": first.get("selection", spec.evaluation.selection),
            "score": first.get("score", "accuracy"),
            "entries": {m: r["entries"][m] for m, r in records.items()},
            "untuned": [e.display_name for e in spec.personalization
                        if e.stage == "personalize" and not spec.tuning.find(e.display_name)],
            "warning": unequal_tuning(spec)}


def rounds_line(spec, records: dict[str, dict] | None = None) -> str:
    """How long each model that ran trained, e.g. ``fedavg 30 rounds, local 20 epochs, ...``.

    A model started from the warm start names its warm-start rounds (``fedper 30 + 30
    warm-start rounds``); a tuned entry counts with the setting chosen for it (`records`,
    `tuning_records`, see `pflpipe.compute.in_all.plan`).

    >>> from pflpipe.spec import Spec
    >>> rounds_line(Spec.model_validate({
    ...     "experiment": {"name": "t"}, "dataset": {"name": "digits"},
    ...     "partition": {"strategy": "ds1", "n_clients": 2}, "personalization": []}))
    'fedavg 20 rounds'
    """
    from pflpipe.compute.in_all import plan

    return ", ".join(plan(spec, records).described.values())


def _seed_of(directory: Path) -> int | None:
    manifest = Path(directory) / layout.COLLECTED_JSON
    return json.loads(manifest.read_text())["seed"] if manifest.is_file() else None


def _models(directory: Path) -> list[str]:
    return json.loads((Path(directory) / layout.COLLECTED_JSON).read_text())["models"]


def tracked_metrics(report) -> dict[str, float]:
    """Return the selected metrics' means by MLflow name; undefined ones are left out.

    Names are ``{model}.{split}.{metric}`` (e.g. ``persfl.test.AA``),
    ``{model}.{split}.{group}.{metric}`` for fairness (e.g. ``persfl.test.improved.JI``), and
    ``{model}.{split}.GA``, ``.PA`` and ``.beats_global`` for the generalized vs personalized
    comparison (`pflpipe.metrics.generalization`); each mean's 95 % interval beside it
    (``persfl.test.AA.ci_low``, ``.ci_high``) and every pair of models compared
    (``pairwise.test.persfl_vs_fedper.AA.p_holm``, ...: `pairwise_report.tracked_metrics`).
    """
    from pflpipe.report import pairwise_section as pairwise_report

    metrics: dict[str, float] = {}
    for split, summary in report.splits.items():
        for model, result in summary.models.items():
            for path, value in result.mean.items():
                group, name = path.rsplit(".", 1)
                if value is None or name not in report.metrics or not math.isfinite(value):
                    continue
                if group.startswith("fairness."):
                    name = f"{group.split('.', 1)[1]}.{name}"
                elif group == "accuracy" and name == "AA":
                    continue  # the same value as performance.AA
                metrics[_metric_name(f"{model}.{split}.{name}")] = value
    for split, comparisons in report.comparisons.items():
        for model, comparison in comparisons.items():
            metrics |= {_metric_name(f"{model}.{split}.{name}"): value
                        for name, value in comparison.mean.items()
                        if value is not None and math.isfinite(value)}
    metrics |= {_metric_name(name): value for name, value in
                pairwise_report.tracked_metrics(report.uncertainty, report.metrics).items()}
    return metrics


def verdict_tags(report) -> dict[str, str]:
    """The parent run's answers as tags: ``best.{split}`` and ``fairest.{split}``.

    Each holds the models tied at the top, comma-separated (one name where the corrected paired
    test over seeds resolves the winner; every contender with one seed; empty where undecided
    or with nothing to compare), with ``.resolved`` and ``.status`` (`Verdict.status`) beside it.
    """
    tags = {}
    for split, assessment in report.uncertainty.items():
        for question, verdict in (("best", assessment.best), ("fairest", assessment.fairest)):
            tags[f"{question}.{split}"] = ", ".join(verdict.top)
            tags[f"{question}.{split}.resolved"] = str(verdict.status == "resolved").lower()
            tags[f"{question}.{split}.status"] = verdict.status
    return tags


def _metric_name(name: str) -> str:
    # MLflow allows letters, digits, _ - . / and spaces in metric names.
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name)
