"""The report's compute section: its table and its figures (accuracy against samples, diagnostics).

The numbers come from `pflpipe.compute` (in all, warm start included); matplotlib is imported
inside the figure functions.
"""

import math
from collections.abc import Mapping, Sequence

from pflpipe.compute.in_all import Plan, in_all, ratio
from pflpipe.compute.totals import MATCHED_ON, accuracy_vs_samples, totals
from pflpipe.engine.records import DIAGNOSTIC_PREFIX

#: The header of the report's compute table (`table_rows`).
TABLE_HEADER = ["model", "local steps", "samples (fwd+bwd)", "of which warm start", "MB sent",
                "MB received", "samples / least", "passes per sample and epoch",
                "adaptation samples"]


def table_rows(history: Sequence[dict], plan: Plan, models: Sequence[str]) -> list[list[str]]:
    """One row per model, counts in all (warm start included), mean over seeds.

    Steps, samples and MB are in all; "of which warm start" is the warm start's share of the
    samples; "samples / least" compares the samples in all with the smallest; "passes per sample
    and epoch" is the model's own samples over its scheduled passes over the data (FedAvg 1).
    """
    counted, own = in_all(history, plan), totals(history)
    shown = [m for m in models if m in counted] + sorted(set(counted) - set(models))
    least = min((counted[m][MATCHED_ON] for m in shown if counted[m][MATCHED_ON] > 0), default=0.0)
    rows = []
    for m in shown:
        count = counted[m]
        warm = count[MATCHED_ON] - own[m][MATCHED_ON]
        passes = plan.passes(m, own[m][MATCHED_ON])
        rows.append([m, f"{count['steps']:,.0f}", f"{count['samples']:,.0f}",
                     f"{warm:,.0f}" if warm else "0", f"{count['bytes_sent'] / 1e6:,.3f}",
                     f"{count['bytes_received'] / 1e6:,.3f}",
                     ratio(count[MATCHED_ON], least) if least else "–",
                     f"{passes:.3g}" if passes is not None else "–",
                     f"{count['adaptation_samples']:,.0f}"])
    return rows


def accuracy_vs_samples_png(history: list[dict], split: str, models: list[str],
                            start: Mapping[tuple[str, str], float] | None = None) -> bytes:
    """One line per model: mean `split` accuracy against the samples processed so far.

    A warm-started model's line starts at the samples of its warm start (`start`).
    """
    from matplotlib.figure import Figure

    from pflpipe.report.report_figures import _png, colors

    curves = accuracy_vs_samples(history, split, start)
    palette = colors([*models, *sorted(set(curves) - set(models))])
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for model in [m for m in palette if m in curves]:
        samples, accuracy = curves[model]
        ax.plot(samples, accuracy, marker=".", color=palette[model], label=model, linewidth=1.4)
    ax.set_xscale("symlog")
    ax.set_xlabel("samples processed (forward + backward), all clients, warm start included")
    ax.set_ylabel(f"mean {split} accuracy")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=7)
    ax.set_title(f"{split} accuracy against compute (mean over seeds)", fontsize=10)
    return _png(fig)


def diagnostics_png(model: str, series: dict[str, tuple[list, list]]) -> bytes:
    """One panel per diagnostic of `model` (a vector's entries share one): mean over rounds."""
    from matplotlib.figure import Figure

    from pflpipe.report.report_figures import _png

    panels: dict[str, list[str]] = {}
    for column in series:
        base = column[len(DIAGNOSTIC_PREFIX):]
        head, _, tail = base.rpartition(".")
        panels.setdefault(head if tail.isdigit() and head else base, []).append(column)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(max(5.5, 3.6 * cols), 2.6 * rows + 0.5))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (name, columns) in zip(axes.flat, panels.items(), strict=False):
        for column in columns:
            rounds, mean = series[column]
            ax.plot(rounds, mean, linewidth=1.3, label=column[len(DIAGNOSTIC_PREFIX):])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if len(columns) > 1:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{model}: diagnostics per round (mean over clients and seeds)", fontsize=10)
    fig.tight_layout()
    return _png(fig)
