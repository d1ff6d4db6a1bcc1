"""A sweep's report: every point's models side by side, read from each point's own report.

Each point has a full report of its own (evaluate_fairness: means, 95 % intervals over clients,
Holm-corrected pairwise verdicts); this page gathers, per point, every model's mean of the
chosen metric with its interval and the verdict on the best model, and links each point's
report. A sweep over one numeric setting gets a figure of the metric against that setting with
an interval band per model; any other sweep is read from the table.
"""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pflpipe import layout
from pflpipe.report.rendering import Block, to_html, to_markdown

#: The metric the sweep report compares (a dotted path of report.json's models and intervals).
METRIC = "performance.AA"
#: The figure of `METRIC` against a numeric swept setting, in the report's folder.
SWEEP_PNG = layout.report_figure("sweep")


@dataclass(frozen=True)
class PointReport:
    """One point: its label, its overrides and its report (report.json, and its folder)."""

    label: str
    overrides: dict
    report: dict
    folder: str   # the point's report folder, relative to the sweep report's folder


def read_point(label: str, overrides: dict, report_dir: Path, relative_to: Path) -> PointReport:
    """The point's report.json, and where its report lies as seen from `relative_to`."""
    import os

    report = json.loads((Path(report_dir) / layout.REPORT_JSON).read_text(encoding="utf-8"))
    return PointReport(label, overrides, report, Path(os.path.relpath(report_dir, relative_to))
                       .as_posix())


def rows(point: PointReport, metric: str = METRIC) -> list[dict]:
    """Every model of the point: its mean of `metric` and 95 % interval on the primary split.

    >>> report = {"primary_split": "test", "models": {"fedavg": {"performance": {"AA": 0.9}}},
    ...           "splits": {"test": {"uncertainty": {"intervals": {"fedavg": {
    ...               "performance.AA": {"low": 0.85, "high": 0.95}}}}}}}
    >>> rows(PointReport("a", {}, report, "."))
    [{'model': 'fedavg', 'mean': 0.9, 'low': 0.85, 'high': 0.95}]
    """
    report = point.report
    split = report.get("splits", {}).get(report.get("primary_split"), {})
    intervals = split.get("uncertainty", {}).get("intervals", {})
    out = []
    for model, result in report["models"].items():
        value: object = result
        for part in metric.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        interval = intervals.get(model, {}).get(metric, {})
        out.append({"model": model, "mean": value, "low": interval.get("low"),
                    "high": interval.get("high")})
    return out


def separated(point: PointReport) -> str:
    """Which models the point's data separate on the best-model question, in one line.

    >>> pair = {"a": "x", "b": "y", "resolved": True, "ahead": "x", "p_holm": 0.01}
    >>> separated(PointReport("a", {}, {"verdicts": {"best": {"leader": "x", "winner": "x",
    ...     "pairs": [pair]}}}, "."))
    'x best; x ahead of y (p_holm 0.01)'
    >>> separated(PointReport("a", {}, {"verdicts": {"best": {"leader": None, "top": [],
    ...     "reason": "the table holds no personalized model, only the baselines"}}}, "."))
    'no verdict (the table holds no personalized model, only the baselines)'
    """
    verdict = point.report.get("verdicts", {}).get("best") or {}
    if not (verdict.get("winner") or verdict.get("top") or verdict.get("leader")):
        return f"no verdict ({verdict.get('reason') or 'one model'})"
    pairs = verdict.get("pairs", [])
    ahead = [f"{p['ahead']} ahead of {p['b'] if p['ahead'] == p['a'] else p['a']} "
             f"(p_holm {p['p_holm']:.2g})" for p in pairs if p.get("resolved")]
    head = (f"{verdict['winner']} best" if verdict.get("winner") else
            f"{' and '.join(verdict.get('top') or [verdict['leader']])} not separated")
    return "; ".join([head, *ahead])


def numeric_setting(points: Sequence[PointReport]) -> str | None:
    """The swept setting to plot against: the only key, when every value is a number."""
    keys = {key for point in points for key in point.overrides}
    if len(keys) != 1:
        return None
    key = next(iter(keys))
    values = [point.overrides[key] for point in points]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return key
    return None


def blocks(points: Sequence[PointReport], title: str, metric: str = METRIC) -> list[Block]:
    """The sweep report's blocks: the table, the figure (numeric sweeps), the links."""
    out: list[Block] = [("h1", title), ("p", f"{len(points)} points; each model's mean "
                         f"{metric} on each point's primary split with its 95 % interval over "
                         "clients, and the point's corrected pairwise verdict on the best model "
                         "(the same rules as each point's own report).")]
    models = list(dict.fromkeys(r["model"] for p in points for r in rows(p, metric)))
    table = []
    for point in points:
        found = {r["model"]: r for r in rows(point, metric)}
        table.append([point.label, *(_cell(found.get(m)) for m in models), separated(point)])
    out.append(("table", ["point", *models, "the data separate"], table))
    if numeric_setting(points):
        out.append(("figure", SWEEP_PNG, f"{metric} against {numeric_setting(points)}: each "
                    "model's mean with its 95 % interval band over clients."))
    out += [("h2", "Each point's report"),
            ("links", [(point.label, f"{point.folder}/{layout.REPORT_HTML}") for point in points])]
    return out


def _cell(row: dict | None) -> str:
    if row is None or row["mean"] is None:
        return "—"
    if row["low"] is None or row["high"] is None:
        return f"{row['mean']:.4f}"
    return f"{row['mean']:.4f} [{row['low']:.4f}, {row['high']:.4f}]"


def figure_png(points: Sequence[PointReport], key: str, metric: str = METRIC) -> bytes:
    """The metric against the numeric setting `key`: a line and interval band per model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from pflpipe.report.report_figures import _png, colors

    ordered = sorted(points, key=lambda p: p.overrides[key])
    models = list(dict.fromkeys(r["model"] for p in ordered for r in rows(p, metric)))
    palette = colors(models)
    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for model in models:
        line = [(p.overrides[key], r) for p in ordered for r in rows(p, metric)
                if r["model"] == model and r["mean"] is not None]
        xs = [x for x, _ in line]
        ax.plot(xs, [r["mean"] for _, r in line], marker="o", color=palette[model], label=model)
        band = [(x, r["low"], r["high"]) for x, r in line if r["low"] is not None]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                            color=palette[model], alpha=0.2, linewidth=0)
    values = [p.overrides[key] for p in ordered]
    if min(values) > 0 and max(values) / min(values) >= 20:
        ax.set_xscale("log")
    ax.set_xlabel(key)
    ax.set_ylabel(metric)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return _png(fig)


def write_sweep_report(points: Sequence[PointReport], out_dir: Path, title: str,
                       metric: str = METRIC) -> list[Path]:
    """Write report.md, report.html, sweep.json and the figure into `out_dir`; return them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    content = blocks(points, title, metric)
    images = {}
    if (key := numeric_setting(points)) is not None:
        images[SWEEP_PNG] = figure_png(points, key, metric)
        (out_dir / SWEEP_PNG).parent.mkdir(exist_ok=True)
        (out_dir / SWEEP_PNG).write_bytes(images[SWEEP_PNG])
    markdown = to_markdown(content)
    facts = {"format": 1, "metric": metric, "points": [
        {"label": p.label, "overrides": p.overrides, "report": p.folder,
         "models": {r["model"]: {k: r[k] for k in ("mean", "low", "high")}
                    for r in rows(p, metric)},
         "separated": separated(p)} for p in points]}
    files = {layout.REPORT_MD: markdown, layout.REPORT_HTML: to_html(content, images, title),
             layout.SWEEP_JSON: json.dumps(_finite(facts), indent=2) + "\n"}
    written = []
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    return written + [out_dir / name for name in images]


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def publish_sweep(spec, run_dir: Path) -> Path:
    """Write each point's point.json and the sweep report into a published sweep run.

    `run_dir` holds ``points/<label>/report`` (`pflpipe.pipelines.local_runner.publish`); the report
    goes to ``run_dir/report``. Returns that folder.
    """
    from pflpipe.spec.sweep import points

    run_dir = Path(run_dir)
    out = run_dir / layout.REPORT_FOLDER
    found = []
    for point in points(spec):
        folder = run_dir / layout.point_folder(point.label)
        (folder / layout.POINT_JSON).write_text(json.dumps(
            {"label": point.label, "overrides": point.overrides}, indent=2) + "\n",
            encoding="utf-8")
        found.append(read_point(point.label, point.overrides, folder / layout.REPORT_FOLDER, out))
    write_sweep_report(found, out, f"{spec.experiment.name}: sweep of {len(found)} points")
    return out


def read_sweep(run_dir: Path, out_dir: Path | None = None) -> list[PointReport]:
    """The points of a published sweep run (``points/<label>/{point.json,report/}``).

    Their report folders are given relative to `out_dir` (default: the run's own report).
    """
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / layout.REPORT_FOLDER
    out = []
    for point_file in sorted((run_dir / layout.POINTS).glob(f"*/{layout.POINT_JSON}")):
        point = json.loads(point_file.read_text(encoding="utf-8"))
        out.append(read_point(point["label"], point["overrides"],
                              point_file.parent / layout.REPORT_FOLDER, out_dir))
    order = {label: i for i, label in enumerate(_order(run_dir))}
    return sorted(out, key=lambda p: order.get(p.label, len(order)))


def _order(run_dir: Path) -> list[str]:
    """The points' order as the sweep ran them (its sweep.json), when it is there."""
    facts = Path(run_dir) / layout.REPORT_FOLDER / layout.SWEEP_JSON
    if not facts.is_file():
        return []
    return [p["label"] for p in json.loads(facts.read_text(encoding="utf-8"))["points"]]
