"""Stage `evaluate_fairness`: evaluate every training stage's results table; write the report.

Concatenates the `results.csv` of each results directory, evaluates it with the spec's
`evaluation` settings (baselines, selection, metrics) and writes report.json, report.md,
report.html and figures/*.png into the output directory (see `pflpipe.metrics.report`).
"""

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

from pflpipe.errors import DataError
from pflpipe.storage import upload_results
from pflpipe.tracking import NULL_TRACKER, Tracker

log = logging.getLogger(__name__)
RESULTS = "results.csv"


@dataclass(frozen=True)
class ReportResult:
    """What evaluate_fairness wrote, and the answers per split."""

    out_dir: Path
    files: tuple[Path, ...]
    best: dict[str, str | None]
    fairest: dict[str, str | None]
    answers: str
    markdown: str

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


def run(spec, results_dirs: list[Path], out_dir: Path, *, tracker: Tracker = NULL_TRACKER
        ) -> ReportResult:
    """Evaluate the results of `results_dirs` and write the fairness report into `out_dir`."""
    from pflpipe.metrics import read_table
    from pflpipe.metrics.report import build_report, write_report
    from pflpipe.spec.dataset import task_of

    evaluation = spec.evaluation
    unit = "neg_mse" if task_of(spec.dataset) == "regression" else "fraction"
    table = read_table(results_tables(results_dirs), unit=unit)
    report = build_report(table, local=evaluation.baselines.local,
                          global_=evaluation.baselines.global_, selection=evaluation.selection,
                          metrics=tuple(evaluation.metrics), validation="val" in table.splits)
    files = write_report(report, Path(out_dir))
    log.info("evaluate_fairness: %s", report.answers())
    tracker.log_params({"evaluation.selection": evaluation.selection,
                        "evaluation.baselines.local": evaluation.baselines.local,
                        "evaluation.baselines.global": evaluation.baselines.global_,
                        "evaluation.unit": report.unit})
    tracker.log_metrics(tracked_metrics(report))
    tracker.set_tags({f"best.{s}": r.best.model or "" for s, r in report.splits.items()}
                     | {f"fairest.{s}": r.fairest.model or "" for s, r in report.splits.items()})
    for path in (files.json, files.markdown, files.html):
        tracker.log_artifact(path, "report")
    tracker.log_artifact(files.out_dir / "figures", "report/figures")
    upload_results(spec, files.out_dir, "report")
    return ReportResult(
        out_dir=files.out_dir, files=(files.json, files.markdown, files.html, *files.figures),
        best={s: r.best.model for s, r in report.splits.items()},
        fairest={s: r.fairest.model for s, r in report.splits.items()},
        answers=report.answers(), markdown=files.markdown.read_text(encoding="utf-8"),
    )


def tracked_metrics(report) -> dict[str, float]:
    """Return the selected metrics' means by MLflow name; undefined ones are left out.

    Names are ``{model}.{split}.{metric}`` (e.g. ``persfl.test.AA``), and
    ``{model}.{split}.{group}.{metric}`` for fairness (e.g. ``persfl.test.improved.JI``).
    """
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
    return metrics


def _metric_name(name: str) -> str:
    # MLflow allows letters, digits, _ - . / and spaces in metric names.
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name)
