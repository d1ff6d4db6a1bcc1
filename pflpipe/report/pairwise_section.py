"""The pairwise comparisons in words and tables.

The answers they gate, the report's blocks, pairwise.csv and the MLflow metrics
(`pflpipe.metrics.pairwise` computes the comparisons).
"""

import csv
import io
import math
from collections.abc import Mapping, Sequence

from pflpipe import markdown
from pflpipe.metrics.pairwise import Assessment, Pair, Verdict
from pflpipe.metrics.results_table import measure
from pflpipe.metrics.summary import PATHS, Decision, SplitSummary
from pflpipe.metrics.uncertainty import ALPHA, CLIENTS, MIN_SEEDS, RESAMPLES
from pflpipe.report.rendering import Block, fmt, heading

#: The columns of pairwise.csv (a row per pair of every family).
CSV_COLUMNS = ("split", "question", "metric", "a", "b", "delta", "ci_low", "ci_high",
               "ci_level", "p", "p_holm", "n", "over", "test", "resolved", "ahead",
               "units_needed", "training_noise", "reason")
PAIR_HEADER = ["question", "a − b", "Δ", "CI (95 % unless marked)", "p", "p (Holm)", "n",
               "test", "verdict", "to resolve"]
QUESTION_TEXT = {"best": "best ({measure})", "fairest": "fairest (JI over U⁺)",
                 "baselines": "vs baseline ({measure})"}
#: What a one-seed verdict adds: the noise its test did not see, and how to measure it.
UNMEASURED = ("training noise was not measured (one seed: the test over its clients treats "
              f"them as the only noise); {MIN_SEEDS} or more seeds (experiment.seeds) would "
              "measure it")
GROUP_TEXT = {"improved": "QoI over U⁺", "decreased": "|QoI| over U⁻"}


def answer(summary: SplitSummary, assessment: Assessment) -> str:
    """Answer the thesis's two questions for the split, naming a model only where resolved."""
    lines = [_line(summary, summary.best, assessment.best, "Best performing",
                   assessment.baselines),
             _line(summary, summary.fairest, assessment.fairest, "Fairest")]
    return " ".join([*lines, *summary.remarks(assessment.best.winner, assessment.fairest.winner,
                                              fairness_of=summary.fairest.model)])


def _line(summary: SplitSummary, decision: Decision, verdict: Verdict, title: str,
          baselines: Sequence[Pair] = ()) -> str:
    head, leader, unit = f"{title} on {summary.split}:", verdict.leader, summary.unit
    ahead = "ahead of" if verdict.question == "best" else "fairer than"
    if verdict.status == "undecided":
        return f"{head} {decision.explain()}."
    if verdict.status == "nothing to compare":
        against = [f"{p.b} ({describe(p, leader, unit)})" for p in baselines if p.a == leader]
        return (f"{head} nothing to compare: {verdict.reason}" +
                (f"; against the baselines: {'; '.join(against)}" if against else "") + ".")
    if verdict.status == "resolved":
        others = [f"{p.b if p.a == leader else p.a} ({describe(p, leader, unit)})"
                  for p in verdict.pairs if leader in (p.a, p.b)]
        return (f"{head} {decision.explain()}; resolved: the corrected paired test puts it "
                f"{ahead} {_join(others)}.")
    pieces = []
    for model in verdict.top[1:]:
        pair = verdict.against(model)
        if pair is None:
            pieces.append(f"{leader} vs {model}: not compared (defined on fewer than 2 seeds)")
        elif pair.ahead == model:
            pieces.append(f"{model} is {ahead} {leader}: {describe(pair, model, unit)}")
        else:
            pieces.append(f"{leader} vs {model}: {describe(pair, leader, unit)}")
    by_vote = f"{vote(decision)} alone it would be {decision.explain()}"
    if verdict.status == "training noise not measured":
        over = f"over these {verdict.n} clients"
        if verdict.ahead_over_clients:
            others = [f"{p.b if p.a == leader else p.a} ({describe(p, leader, unit)})"
                      for p in verdict.pairs if leader in (p.a, p.b)]
            seen = f"{over} the corrected paired test puts {leader} {ahead} {_join(others)}"
        else:
            seen = f"{over} {_join(verdict.top)} are not separated ({'; '.join(pieces)})"
        return f"{head} no winner from one training seed: {seen}; but {UNMEASURED}; {by_vote}."
    only = verdict.against(verdict.top[1]) if len(verdict.top) == 2 else None
    if only is not None and not only.resolved:
        text = f"{_join(verdict.top)} are indistinguishable here ({describe(only, leader, unit)})"
    else:
        text = f"{_join(verdict.top)} are tied at the top ({'; '.join(pieces)})"
    return f"{head} {text}; {by_vote}."


#: The number of criteria of each question's vote, in words (summary.BEST_CRITERIA, ...).
COUNT = {4: "four", 7: "seven"}


def vote(decision: Decision) -> str:
    """What the thesis's vote is, in words: ``by the thesis's seven criteria``."""
    n = len(decision.winners)
    kind = "" if decision.question == "best" else " fairness"
    return f"by the thesis's {COUNT.get(n, n)}{kind} criteria"


def describe(pair: Pair, first: str, unit: str) -> str:
    """The pair's gap from `first`'s side, e.g. ``Δ +0.4 pp, 95 % CI [−1.9, +2.7], p = 0.7, ...``.

    p is Holm-corrected, the interval at the level Holm tested the pair at; a pair without
    spread says what cannot be estimated; an unresolved pair says how many units would settle
    it, or that none of this many could.
    """
    g, sign = pair.gap, 1 if pair.a == first else -1
    name = pair.metric.rsplit(".", 1)[1]
    text = f"{'Δ' if name == 'AA' else 'Δ' + name} {number(sign * g.delta, pair.metric, unit)}"
    if g.reason:
        return f"{text}, n = {g.n} {g.over}; no interval and no test: {g.reason}"
    if pair.low is not None:
        low, high = sorted((sign * pair.low, sign * pair.high))
        text += f", {level_text(pair.alpha)} CI [{number(low, pair.metric, unit, suffix=False)}" \
                f", {number(high, pair.metric, unit, suffix=False)}]"
    text += f", p {format_p(pair.p_holm, '= ')}, n = {g.n} {g.over}"
    if pair.unreachable:
        tied = f", {g.zeros} of them showing no difference," if g.zeros else ""
        text += (f"; with {g.n} {g.over}{tied} the {g.test} test cannot reach p < "
                 f"{pair.alpha:.2g} whatever the gap"
                 + (f"; about {pair.needed} {g.over} would" if pair.needed else ""))
    elif not pair.resolved:
        text += (f"; about {pair.needed} {g.over} would settle it" if pair.needed
                 else "; no gap to settle")
    return text


def level_text(alpha: float) -> str:
    """The level of an interval tested at `alpha`: ``95 %``, or e.g. ``98.3 % (Holm)``.

    >>> level_text(0.05), level_text(0.05 / 3)
    ('95 %', '98.3 % (Holm)')
    """
    if math.isclose(alpha, ALPHA):
        return "95 %"
    return f"{100 * (1 - alpha):.3g} % (Holm)"


def number(value: float, metric: str, unit: str, *, suffix: bool = True) -> str:
    """A signed gap: accuracy in percentage points (1 decimal), −MSE and JI with more digits.

    >>> number(0.004, "accuracy.AA", "fraction"), number(-0.0213, "fairness.improved.JI", "")
    ('+0.4 pp', '−0.021')
    """
    value += 0.0  # no −0
    if metric.endswith(".AA") and unit != "neg_mse":
        text = f"{value * (100 if unit == 'fraction' else 1):+.1f}" + (" pp" if suffix else "")
    else:
        text = f"{value:+.4f}" if metric.endswith(".AA") else f"{value:+.3f}"
    return text.replace("-", "−")


def format_p(p: float, equals: str = "") -> str:
    """Two significant digits (after `equals`), ``< 0.001`` below.

    >>> format_p(0.7), format_p(0.04321), format_p(0.0001), format_p(1.0, "= ")
    ('0.7', '0.043', '< 0.001', '= 1')
    """
    return "< 0.001" if p < 0.001 else f"{equals}{p:.2g}"


def _join(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def over_text(assessment: Assessment, pairs: bool = False) -> str:
    """Which units the intervals (or, with `pairs`, the paired tests) are over, in words."""
    if assessment.over == CLIENTS and pairs:
        return (f"over the {assessment.n} clients of one seed (accuracy: Wilcoxon's "
                "signed-rank test and its Hodges–Lehmann interval; JI: the paired bootstrap of "
                f"{RESAMPLES:,} client resamples)")
    if assessment.over == CLIENTS:
        return (f"over the {assessment.n} clients of one seed (percentile bootstrap of "
                f"{RESAMPLES:,} client resamples; it says how much this run's clients vary, not "
                "whether another seed would agree)")
    return f"over {assessment.n} seeds (t-interval of the per-seed values)"


def blocks(assessment: Assessment, summary: SplitSummary, metrics: Sequence[str]) -> list[Block]:
    """The split's pairwise table and intervals table (beside the thesis's tables)."""
    out: list[Block] = []
    pairs = [(q, p) for q, family in _families(assessment) for p in family]
    if pairs:
        noise = f" With one seed, {UNMEASURED}." if assessment.over == CLIENTS else ""
        out += [("h3", "Pairwise comparisons"),
                ("p", "Each pair of personalized models, and each personalized model against "
                      "the global and the local baseline, first minus second, "
                      f"{over_text(assessment, pairs=True)}; p (Holm) is corrected over the "
                      "pairs of its question. A pair is resolved where p (Holm) < 0.05; its "
                      "interval is the "
                      "one its test inverts, at the level Holm tested it at, so it excludes 0 "
                      "exactly then. 'To resolve' is roughly how many units the observed gap "
                      f"and spread would need.{noise}"),
                ("table", PAIR_HEADER, [_pair_row(q, p, summary.unit) for q, p in pairs])]
    paths = [p for p in PATHS if p.rsplit(".", 1)[1] in metrics and p != "accuracy.AA"]
    models = list(summary.models)
    rows = [[_label(path, summary.unit), *(_cell(assessment.intervals[m][path], path,
                                                  summary.unit) for m in models)]
            for path in paths]
    return out + [("h3", "95 % intervals"),
                  ("p", f"Each metric's 95 % interval {over_text(assessment)}; — where the "
                        "metric is undefined (or defined on too few resamples or seeds)."),
                  ("table", ["Metric", *models], rows)]


def pairs_markdown(pairs: Sequence[Pair], unit: str = "fraction") -> list[str]:
    """The lines of a Markdown table of `pairs` (as the report's, without the question column).

    `unit` is the scores' (fraction, percent, neg_mse): accuracy gaps show in percentage points.
    """
    rows = [_pair_row("best", pair, unit)[1:] for pair in pairs]
    return markdown.table(PAIR_HEADER[1:], rows, "l" + "r" * 5 + "lll")


def _families(assessment: Assessment) -> list[tuple[str, Sequence[Pair]]]:
    return [("best", assessment.best.pairs), ("fairest", assessment.fairest.pairs),
            ("baselines", assessment.baselines)]


def _pair_row(question: str, pair: Pair, unit: str) -> list[str]:
    g = pair.gap
    ci = "—" if pair.low is None else (
        f"[{number(pair.low, pair.metric, unit, suffix=False)}, "
        f"{number(pair.high, pair.metric, unit, suffix=False)}]"
        + ("" if math.isclose(pair.alpha, ALPHA) else f" ({100 * (1 - pair.alpha):.3g} %, Holm)"))
    if g.reason:
        verdict = "spread cannot be estimated"
    elif pair.ahead:
        verdict = f"{pair.ahead} ahead" + (" over these clients" if g.over == CLIENTS else "")
    elif pair.unreachable:
        verdict = f"{g.n} {g.over} cannot reach p < {pair.alpha:.2g}"
    else:
        verdict = "indistinguishable"
    need = f"about {pair.needed} {g.over}" if pair.needed else "—"
    return [QUESTION_TEXT[question].format(measure=measure(unit)), f"{pair.a} − {pair.b}",
            number(g.delta, pair.metric, unit),
            ci, format_p(g.p), format_p(pair.p_holm), f"{g.n} {g.over}", g.test, verdict, need]


def _label(path: str, unit: str) -> str:
    group, name = path.rsplit(".", 1)
    if group.startswith("fairness."):
        kind = group.split(".", 1)[1]
        return f"{heading(name)} ({GROUP_TEXT.get(kind) or measure(unit, fairness=True)})"
    return heading(name)


def _cell(interval, path: str, unit: str) -> str:
    if interval.low is None:
        return "—"
    name = path.rsplit(".", 1)[1]
    return f"[{fmt(interval.low, name, unit)}, {fmt(interval.high, name, unit)}]"


def pairwise_csv(assessments: Mapping[str, Assessment]) -> str:
    """pairwise.csv: every pair of every split and question (`CSV_COLUMNS`)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for split, assessment in assessments.items():
        for question, family in _families(assessment):
            for pair in family:
                writer.writerow({"split": split, "question": question, **pair.to_json()})
    return out.getvalue()


def tracked_metrics(assessments: Mapping[str, Assessment], metrics: Sequence[str]
                    ) -> dict[str, float]:
    """The intervals and pairwise verdicts as MLflow metrics (names before sanitising).

    ``{model}.{split}.{metric}.ci_low`` / ``.ci_high`` beside each mean (fairness metrics as
    ``{group}.{metric}``, e.g. ``persfl.test.improved.JI.ci_low``), and per pair
    ``pairwise.{split}.{a}_vs_{b}.{metric}.`` ``delta``, ``ci_low``, ``ci_high``, ``p``,
    ``p_holm``, ``resolved`` (1 or 0; over one seed's clients ``separated_over_clients``
    instead: they never resolve a pair, training noise unmeasured) and, when unresolved,
    ``units_needed``.
    """
    out: dict[str, float] = {}
    for split, assessment in assessments.items():
        for model, paths in assessment.intervals.items():
            for path, interval in paths.items():
                name = _tracked_name(path)
                if (path == "accuracy.AA"  # the same values as performance.AA
                        or path.rsplit(".", 1)[1] not in metrics or interval.low is None):
                    continue
                out[f"{model}.{split}.{name}.ci_low"] = interval.low
                out[f"{model}.{split}.{name}.ci_high"] = interval.high
        for pair in assessment.pairs:
            g = pair.gap
            stem = f"pairwise.{split}.{pair.a}_vs_{pair.b}.{_tracked_name(pair.metric)}"
            # one seed's clients separate a pair, they never resolve it (training noise)
            verdict = "separated_over_clients" if g.over == CLIENTS else "resolved"
            values = {"delta": g.delta, "ci_low": pair.low, "ci_high": pair.high, "p": g.p,
                      "p_holm": pair.p_holm, verdict: float(pair.resolved),
                      "units_needed": pair.needed}
            out |= {f"{stem}.{k}": float(v) for k, v in values.items()
                    if v is not None and math.isfinite(v)}
    return out


def _tracked_name(path: str) -> str:
    """The metric part of a tracked name, as `evaluate_fairness.tracked_metrics` spells it."""
    group, name = path.rsplit(".", 1)
    return f"{group.split('.', 1)[1]}.{name}" if group.startswith("fairness.") else name
