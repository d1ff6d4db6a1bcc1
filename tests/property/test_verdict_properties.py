"""Invariants of the uncertainty verdicts over random small tables (issue 46).

Every surface reads one `Verdict`: the report's answers (the CLI's closing line), report.json's
"verdicts" (what `pflpipe.run(...).best` returns, through `pflpipe.api.verdict_top`) and the
MLflow tags (`evaluate_fairness.verdict_tags`). Over tables with one to three personalized
models, one to nine clients, one to three seeds and values from a coarse grid (ties, zero gaps and
zero spread are common), each must hold:

- a pair's verdict never contradicts its interval: resolved exactly when its interval (at the
  level Holm tested it at) excludes 0, and the model ahead is on the interval's side;
- a lone contender, one client or a gap without spread never give "best", "resolved" or a
  zero-width interval;
- with one seed no model is named, and the sentence says training noise was not measured;
- where no data of that many units could reach significance, the sentence says so.
"""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pflpipe.api import verdict_top
from pflpipe.metrics import table_from_records
from pflpipe.metrics.metric_registry import METRIC_REGISTRY
from pflpipe.metrics.uncertainty import ALPHA
from pflpipe.report.report_writer import build_report
from pflpipe.stages.evaluate_fairness import verdict_tags

SETTINGS = settings(max_examples=60, deadline=None)
GRID = [i / 8 for i in range(9)]  # coarse: ties and identical gaps are frequent


@st.composite
def tables(draw):
    n_models = draw(st.integers(1, 3))
    n_clients = draw(st.integers(1, 9))
    seeds = range(draw(st.integers(1, 3)))
    models = ["local", "fedavg", *(f"m{i}" for i in range(n_models))]
    constant = draw(st.booleans())  # every seed the same: zero spread over seeds
    first = {(m, c): draw(st.sampled_from(GRID)) for m in models for c in range(n_clients)}
    rows = [{"seed": s, "client": c, "model": m,
             "accuracy": first[m, c] if constant or s == 0 else draw(st.sampled_from(GRID))}
            for s in seeds for m in models for c in range(n_clients)]
    return table_from_records(rows)


def check_pair(pair):
    g = pair.gap
    if pair.low is None:
        assert not pair.resolved and pair.high is None
        return
    assert pair.low < pair.high, "a zero-width interval"
    excludes = pair.low > 0 or pair.high < 0
    assert excludes == pair.resolved == (pair.p_holm < ALPHA)
    if pair.resolved:
        higher = METRIC_REGISTRY[pair.metric.rsplit(".", 1)[1]].higher_is_better
        assert pair.ahead == (pair.a if (pair.low > 0) == higher else pair.b)
        assert (g.delta > 0) == (pair.low > 0)  # the estimate lies inside its interval
    if g.n < 2 or g.reason:
        assert not pair.resolved


@SETTINGS
@given(tables())
def test_every_surface_of_a_verdict_agrees_with_its_interval_and_its_units(table):
    report = build_report(table)
    split = report.primary.split
    assessment = report.uncertainty[split]
    data = json.loads(json.dumps(report.to_json()))
    tags = verdict_tags(report)
    lines = report.answer(split).split(" Fairest on ")
    for pair in assessment.pairs:
        check_pair(pair)
    contenders = [m for m, r in report.primary.models.items() if r.is_personalized]
    if len(contenders) == 1:
        assert assessment.best.status in ("nothing to compare", "undecided")
    for question, verdict, line in (("best", assessment.best, lines[0]),
                                     ("fairest", assessment.fairest, lines[1])):
        # one source of truth: report.json (pflpipe.run(...).best) and the MLflow tags
        assert verdict_top(data, question) == verdict.top
        assert tags[f"{question}.{split}"] == ", ".join(verdict.top)
        resolved = verdict.status == "resolved"
        assert tags[f"{question}.{split}.resolved"] == str(resolved).lower()
        assert data["verdicts"][question]["resolved"] is resolved
        assert ("resolved:" in line) is resolved
        assert (data[question] is not None) is resolved
        if resolved:
            assert assessment.over == "seeds" and assessment.n >= 2 and len(verdict.top) == 1
            assert verdict.pairs
            for pair in verdict.pairs:
                if verdict.leader in (pair.a, pair.b):
                    assert pair.resolved and pair.ahead == verdict.leader
        if verdict.status == "nothing to compare":
            assert verdict.top == () and not verdict.pairs
            assert "nothing to compare" in line and "wins" not in line
        if assessment.over == "clients" and verdict.leader is not None:
            assert verdict.winner is None
            if verdict.pairs:
                assert "training noise was not measured" in line
        if len(report.primary.clients) == 1:
            assert not any(p.resolved for p in verdict.pairs)
        for pair in verdict.pairs:
            if pair.unreachable and verdict.leader in (pair.a, pair.b):
                assert "cannot reach p <" in line


@SETTINGS
@given(st.lists(st.sampled_from([-0.25, -0.125, 0.0, 0.125, 0.25, 0.375, 0.5]), min_size=2,
                max_size=12),
       st.sampled_from([0.5, 0.2, 0.1, 0.05, 0.025, 0.01, 0.005]))
def test_each_tests_interval_excludes_zero_exactly_when_its_p_is_below_the_level(d, alpha):
    from pflpipe.metrics.uncertainty import (
        bootstrap_means,
        bootstrapped,
        client_resamples,
        over_clients,
        over_seeds,
    )

    resamples = client_resamples(len(d))
    zeros = [0.0] * len(d)
    gaps = [over_clients(d, zeros, resamples), over_seeds(d, zeros)]
    means = bootstrap_means(d, resamples)
    gaps.append(bootstrapped(sum(d) / len(d), 0.0, means, means * 0, len(d)))
    for gap in gaps:
        if gap is None or gap.reason:
            assert gap is None or (gap.low, gap.high, gap.p) == (None, None, 1.0)
            continue
        low, high = gap.interval(alpha)
        if low is None:  # the test cannot reach this level with these units
            assert gap.p >= alpha and gap.p_min >= alpha
        else:
            assert low <= high and (low > 0 or high < 0) == (gap.p < alpha), gap.test
            assert low <= gap.delta <= high or gap.test == "paired bootstrap"
