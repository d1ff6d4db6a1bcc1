"""The report's content as a list of blocks, rendered once to Markdown and once to HTML.

A block is a tuple: ``("h1" | "h2" | "h3" | "p", text)``, ``("list", items)``,
``("links", [(text, href), ...])``, ``("table", header, rows[, best])`` where `best` holds the
(row, column) cells to highlight, or ``("figure", name, caption)`` where `name` is the PNG file
name.
"""

import base64
import html
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from pflpipe import markdown
from pflpipe.layout import REPORT_JSON
from pflpipe.metrics.fairness import FAIRNESS
from pflpipe.metrics.metric_registry import METRIC_REGISTRY, fsum
from pflpipe.metrics.performance import ACCURACY, PERFORMANCE
from pflpipe.metrics.results_table import measure
from pflpipe.metrics.summary import BEST_RULE, FAIREST_RULE, GROUPS, SplitSummary
from pflpipe.report.glossary import legend

Block = tuple
UNIT_TEXT = {
    "fraction": "fractions in [0, 1]",
    "percent": "percent in [0, 100]",
    "neg_mse": "−MSE, the negated mean squared error of a regression (higher is better; the "
               "fairness of the per-client values is that of the MSEs)",
}
GROUP_NAMES = {
    "improved": "QoI over U⁺ (how evenly the improvement is shared)",
    "decreased": "|QoI| over U⁻ (how evenly the loss is shared)",
    "accuracy": "per-client {fair_measure}",
}
NULL_RULE = (
    f"A metric without a value is shown as — and is null in {REPORT_JSON}; the model's "
    "\"reasons\" mapping gives the reason at the metric's dotted path (e.g. "
    "\"performance.MPD\": \"U⁻ is empty: ...\"). Baselines have no QoI metrics."
)
#: Captions of the score figures; {measure} is the unit's score (accuracy, −MSE).
ROUNDS_CAPTION = ("{Measure} over rounds, one panel per model: the mean over clients and seeds "
                  "with a band of ± 1 std (local: epochs alone; PersFL: distillation epochs from "
                  "each client's teacher, epoch 0 being the teacher; a model started from the "
                  "FedAvg warm start says after how many of its rounds, round 0 being the warm "
                  "start's model).")
CLIENTS_CAPTION = ("Each client's {measure} under every model (mean over seeds; error bars: std "
                   "over seeds).{axis}")
#: The client table's row of means (thesis Table 6.2 calls it "Avg Acc").
AVERAGE = {"accuracy": "Avg Acc", "−MSE": "Avg −MSE"}
SEED_RULE = (
    "Each metric is computed per seed on that seed's clients, then reported as mean ± sample "
    "std (K − 1) over seeds; with one seed there is no ±. Clients weigh equally."
)


def fmt(value: float | None, name: str, unit: str) -> str:
    """Format a metric value: PUI/PUD with 1 decimal, accuracy-unit values per unit, else 4 d."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if name in ("PUI", "PUD"):
        return f"{value:.1f}"
    if name == "AV":
        # AV is in unit²: small for fractions; fixed decimals keep a row's values comparable.
        return f"{0.0 if abs(value) < 1e-15 else value:.{2 if unit == 'percent' else 6}f}"
    if name in ("CS", "Entropy", "JI"):
        return f"{value:.4f}"
    return f"{value:.2f}" if unit == "percent" else f"{value:.4f}"


def cell(summary: SplitSummary, model: str, path: str) -> str:
    """Format ``mean ± std`` of one model's metric."""
    name, result = path.rsplit(".", 1)[1], summary.models[model]
    text = fmt(result.mean[path], name, summary.unit)
    std = result.std[path]
    return text if std is None or result.mean[path] is None else \
        f"{text} ± {fmt(std, name, summary.unit)}"


def heading(name: str) -> str:
    """Metric name with its direction, e.g. ``AV ↓``."""
    return f"{name} {METRIC_REGISTRY[name].direction}"


def metric_blocks(summary: SplitSummary, models: list[str], paths: list[str]) -> list[Block]:
    """A metric table and the legend of its abbreviations under it."""
    return [metric_table(summary, models, paths),
            ("p", legend(path.rsplit(".", 1)[1] for path in paths))]


def metric_table(summary: SplitSummary, models: list[str], paths: list[str]) -> Block:
    """Rows of metrics × columns of models; each row's best value (registry direction) marked."""
    rows, best = [], set()
    for i, path in enumerate(paths):
        name = path.rsplit(".", 1)[1]
        rows.append([heading(name), *(cell(summary, m, path) for m in models)])
        best |= {(i, j + 1) for j in _best(
            [summary.models[m].mean[path] for m in models], METRIC_REGISTRY[name].higher_is_better)}
    return ("table", ["Metric", *models], rows, best)


def _best(values: Sequence[float | None], higher: bool) -> list[int]:
    """Indices of the best defined values (ties included); none when all are equal."""
    defined = [v for v in values if v is not None and not math.isnan(v)]
    if len(set(defined)) < 2:
        return []
    top = max(defined) if higher else min(defined)
    return [i for i, v in enumerate(values) if v is not None
            and math.isclose(v, top, rel_tol=1e-9, abs_tol=1e-12)]


def split_blocks(summary: SplitSummary, metrics: Sequence[str],
                 figures: Mapping[str, str], answer: str | None = None,
                 accuracy_notes: Sequence[str] = ()) -> list[Block]:
    """Return the blocks of one split: answers, tables, figures and notes.

    `answer` replaces the summary's own (the thesis vote's) answer: the report's, gated by the
    pairwise tests (`pflpipe.report.pairwise_section.answer`). `accuracy_notes` are said under
    the accuracy summaries (`pflpipe.report.report_notes`).
    """
    personalized = [m for m, r in summary.models.items() if r.is_personalized]
    everyone = list(summary.models)
    seeds = ", ".join(map(str, summary.seeds))
    name = measure(summary.unit)
    words = {"measure": name, "Measure": name[0].upper() + name[1:],
             "fair_measure": measure(summary.unit, fairness=True), "axis": _axis(summary)}
    out: list[Block] = [
        ("h2", f"Split: {summary.split}"),
        ("p", f"{len(summary.clients)} clients, seed(s) {seeds}. {answer or summary.answer()}"),
        ("h3", f"Per-client {name} (thesis Table 6.2 style; mean over seeds)"),
        _client_table(summary),
    ]
    for key, caption in (("rounds", ROUNDS_CAPTION), ("clients", CLIENTS_CAPTION)):
        if key in figures:
            out.append(("figure", figures[key], caption.format(**words)))
    perf = [m for m in PERFORMANCE if m in metrics]
    if perf and personalized:
        out += [("h3", "Performance on the QoI (thesis Table 6.8 style)"),
                *metric_blocks(summary, personalized, [f"performance.{m}" for m in perf])]
    fair = [m for m in FAIRNESS if m in metrics]
    for group in GROUPS if fair else ():
        models = everyone if group == "accuracy" else personalized
        if models:
            out += [("h3", f"Fairness on {GROUP_NAMES[group].format(**words)}"),
                    *metric_blocks(summary, models, [f"fairness.{group}.{m}" for m in fair])]
    acc = [m for m in ACCURACY if m in metrics]
    if acc:
        out += [("h3", f"{words['Measure']} summaries"),
                *metric_blocks(summary, everyone, [f"accuracy.{m}" for m in acc]),
                *(("p", note) for note in accuracy_notes)]
    if "qoi" in figures:
        out.append(("figure", figures["qoi"], "QoI per personalized model: a box over clients "
                    "and seeds, one dot per client and seed; above the dashed line the client "
                    "improved on max(G, L) (thesis Fig. 6.8)."))
    if "fairness" in figures:
        out.append(("figure", figures["fairness"], "Fairness metrics per model (thesis Fig. "
                    "6.9); axes start at 0 and end at the metric's bound (CS, JI: 1; Entropy: ln "
                    "of the number of clients); the fairest bar of each panel is hatched; error "
                    "bars: std over seeds."))
    notes = _notes(summary, personalized)
    if notes:
        out += [("h3", "Undefined metrics"), ("list", notes)]
    return out


def _axis(summary: SplitSummary) -> str:
    """Where the per-client bars' axis starts, when not at 0 (`curves.client_axis`)."""
    from pflpipe.report.score_curves import client_axis

    bottom = client_axis(summary)[0]
    if summary.unit == "neg_mse" or bottom == 0:
        return ""
    return f" The axis starts at {fmt(bottom, 'AA', summary.unit)}, not at 0."


def _client_table(summary: SplitSummary) -> Block:
    """Each client's score per model, the mean and std; each row's best value marked."""
    models = list(summary.models)
    values = [[summary.models[m].per_client_accuracy.get(c) for m in models]
              for c in summary.clients]
    rows = [[f"Client {c}", *(fmt(v, "AA", summary.unit) for v in row)]
            for c, row in zip(summary.clients, values, strict=True)]
    best = {(i, j + 1) for i, row in enumerate(values) for j in _best(row, True)}
    mean_of, std_of = [], []
    for model in models:
        array = np.array(list(summary.models[model].per_client_accuracy.values()))
        mean = fsum(array) / array.size
        mean_of.append(mean)
        std_of.append(math.sqrt(fsum((array - mean) ** 2) / (array.size - 1))
                      if array.size > 1 else None)
    best |= {(len(rows), j + 1) for j in _best(mean_of, True)}
    best |= {(len(rows) + 1, j + 1) for j in _best(std_of, False)}
    return ("table", ["Client", *models],
            [*rows, [AVERAGE[measure(summary.unit)], *(fmt(v, "AA", summary.unit)
                                                          for v in mean_of)],
             ["Std Dev", *(fmt(v, "std", summary.unit) for v in std_of)]], best)


def _notes(summary: SplitSummary, personalized: list[str]) -> list[str]:
    by_model: dict[tuple[str, str], list[str]] = {}
    for model in personalized:
        for path, reason in summary.models[model].reasons.items():
            by_model.setdefault((model, reason), []).append(path)
    # One line per (reason, metrics), naming every model it applies to.
    grouped: dict[tuple[str, str], list[str]] = {}
    for (model, reason), paths in by_model.items():
        groups: dict[str, list[str]] = {}
        for path in paths:
            prefix, name = path.rsplit(".", 1)
            groups.setdefault(prefix, []).append(name)
        where = "; ".join(f"{prefix} {', '.join(names)}" for prefix, names in groups.items())
        grouped.setdefault((reason, where), []).append(model)
    return [f"{', '.join(models)} — {where}: {reason}"
            for (reason, where), models in grouped.items()]


def rule_blocks(*more: str) -> list[Block]:
    """Return the blocks stating how the answers and the numbers are made (`more` appended)."""
    return [("h2", "How the answers are decided"),
            ("list", [BEST_RULE, FAIREST_RULE, SEED_RULE, NULL_RULE, *more])]


def to_markdown(blocks: Sequence[Block]) -> str:
    """Render blocks as GitHub-flavoured Markdown (figures as relative image links)."""
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "list":
            lines += [f"- {item}" for item in block[1]] + [""]
        elif kind == "links":
            lines += [f"- [{text}]({href})" for text, href in block[1]] + [""]
        elif kind == "table":
            header, rows, best = block[1], block[2], block[3] if len(block) > 3 else set()
            lines += [*markdown.table(header, rows, "l" + "r" * (len(header) - 1), best), ""]
        elif kind == "figure":
            lines += [f"![{block[2]}]({block[1]})", "", f"*{block[2]}*", ""]
    return "\n".join(lines).rstrip() + "\n"


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td:not(:first-child) { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
td.best { background: #e6f4ea; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; }
figcaption { font-size: 0.9em; color: #555; }
"""


def inline(text: str) -> str:
    """A paragraph's Markdown (emphasis, code, links) as HTML, as report.md shows it.

    Raw HTML in the text is escaped.

    >>> inline("**Warning.** `warm_start` <b>x</b> fedavg_ft")
    '<strong>Warning.</strong> <code>warm_start</code> &lt;b&gt;x&lt;/b&gt; fedavg_ft'
    """
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).renderInline(text)


def anchor(title: str) -> str:
    """A heading's in-page anchor, as GitHub spells it in Markdown.

    >>> anchor("Words and abbreviations"), anchor("Split: test")
    ('words-and-abbreviations', 'split-test')
    """
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def to_html(blocks: Sequence[Block], images: Mapping[str, bytes], title: str) -> str:
    """Render blocks as one self-contained HTML page; figures are embedded as base64 PNG.

    Paragraphs and list items are Markdown (`inline`), as in report.md; headings, table cells
    and captions are plain text.
    """
    esc = html.escape
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"]
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind} id=\"{anchor(block[1])}\">{esc(block[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{inline(block[1])}</p>")
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "links":
            parts.append("<ul>" + "".join(f"<li><a href=\"{esc(href)}\">{esc(text)}</a></li>"
                                          for text, href in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{esc(h)}</th>" for h in block[1])
            best = block[3] if len(block) > 3 else set()
            body = "".join("<tr>" + "".join(
                f"<td class=\"best\"><strong>{esc(c)}</strong></td>" if (i, j) in best
                else f"<td>{esc(c)}</td>" for j, c in enumerate(row)) + "</tr>"
                for i, row in enumerate(block[2]))
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "figure":
            data = base64.b64encode(images[block[1]]).decode("ascii")
            parts.append(f"<figure><img alt=\"{esc(block[2])}\" src=\"data:image/png;base64,"
                         f"{data}\"><figcaption>{esc(block[2])}</figcaption></figure>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
