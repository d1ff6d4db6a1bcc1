"""Intervals beside the report's means and answers gated by the Holm-corrected paired tests."""

import csv
import io
import json

import numpy as np
import pytest
from scipy import stats

from pflpipe.metrics import summarize, table_from_records
from pflpipe.metrics.pairwise import assess
from pflpipe.metrics.pairwise_report import answer, pairwise_csv, tracked_metrics
from pflpipe.metrics.report import build_report, write_report
from pflpipe.metrics.uncertainty import client_resamples

K = 10
LOCAL = [50.0 + i for i in range(K)]
GLOBAL = [60.0 + i for i in range(K)]
LEADER = [80.0 + i for i in range(K)]
# Wilcoxon over 10 clients: ranks 1..10, 1 and 6 of one sign → exact p = 2 · 19 / 2^10 = 0.037.
BORDERLINE = [0.1, -0.2, -0.3, -0.4, -0.5, 0.6, -0.7, -0.8, -0.9, -1.0]  # leader − second
SECOND = [a - d for a, d in zip(LEADER, [-x for x in BORDERLINE], strict=True)]


def table(models: dict[str, list[float]], seeds=(0,)):
    rows = [{"client": c, "model": m, "accuracy": v[c] + s * 0.5, "seed": s}
            for s in seeds for m, v in {"local": LOCAL, "fedavg": GLOBAL, **models}.items()
            for c in range(K)]
    return table_from_records(rows)


def evaluated(models, seeds=(0,)):
    t = table(models, seeds)
    summaries = summarize(t)
    return summaries["test"], assess(t, summaries)["test"]


def test_identical_models_are_indistinguishable():
    summary, assessment = evaluated({"fedper": LEADER, "persfl": LEADER})
    verdict = assessment.best
    assert summary.best.model == "fedper"  # the vote, tied, breaks by name
    assert verdict.top == ("fedper", "persfl") and verdict.winner is None
    (pair,) = verdict.pairs
    assert (pair.gap.delta, pair.gap.p, pair.p_holm, pair.resolved) == (0.0, 1.0, 1.0, False)
    assert answer(summary, assessment).startswith(
        "Best performing on test: fedper and persfl are indistinguishable here (Δ +0.0 pp, "
        "95 % CI [+0.0, +0.0], p = 1, n = 10 clients; no gap to settle); by the "
        "thesis's seven criteria alone it would be fedper (wins ")


def test_identical_models_are_indistinguishable_over_seeds():
    summary, assessment = evaluated({"fedper": LEADER, "persfl": LEADER}, seeds=(0, 1, 2))
    (pair,) = assessment.best.pairs
    assert (pair.gap.over, pair.gap.n, pair.gap.test, pair.resolved) == (
        "seeds", 3, "paired t", False)
    assert assessment.best.top == ("fedper", "persfl")


def test_a_large_consistent_gap_is_resolved():
    worse = [v - 5 for v in LEADER]
    summary, assessment = evaluated({"persfl": LEADER, "fedper": worse})
    (pair,) = assessment.best.pairs
    assert pair.gap.p == 2 / 2**10 and pair.resolved and pair.ahead == "persfl"
    assert assessment.best.winner == "persfl"
    text = answer(summary, assessment)
    assert text.startswith("Best performing on test: persfl (wins ")
    assert ("resolved: the corrected paired test puts it ahead of fedper (Δ +5.0 pp, 95 % CI "
            "[+5.0, +5.0], p = 0.002, n = 10 clients)") in text


def test_a_large_consistent_gap_is_resolved_over_seeds():
    # Three seeds, persfl 5 points ahead on each, jittered so the gap has a spread.
    rows = [{"client": c, "model": m, "seed": s, "accuracy": v}
            for s, jitter in enumerate((0.0, 0.4, -0.3)) for c in range(K)
            for m, v in (("local", LOCAL[c]), ("fedavg", GLOBAL[c]), ("persfl", LEADER[c]),
                         ("fedper", LEADER[c] - 5 + jitter))]
    t = table_from_records(rows)
    summaries = summarize(t)
    assessment = assess(t, summaries)["test"]
    (pair,) = assessment.best.pairs
    d = [5.0, 4.6, 5.3]
    assert pair.gap.p == pytest.approx(stats.ttest_1samp(d, 0).pvalue, rel=1e-9)
    assert pair.resolved and assessment.best.winner == "persfl"
    # The interval of persfl's AA over the seeds: the t-interval of its 3 per-seed means.
    interval = assessment.intervals["persfl"]["accuracy.AA"]
    assert (interval.over, interval.n) == ("seeds", 3)
    assert (interval.low, interval.high) == pytest.approx((84.5, 84.5))


def test_holm_changes_a_borderline_verdict():
    # Alone, the leader beats the second at p = 0.037: resolved.
    summary, alone = evaluated({"lead": LEADER, "second": SECOND})
    (pair,) = alone.best.pairs
    assert pair.gap.p == pytest.approx(2 * 19 / 2**10) and pair.resolved
    assert alone.best.winner == "lead"
    # With two more models (far below both, tied with each other) there are 6 pairs; Holm
    # doubles the borderline p (4 smaller ones come first): 0.074, unresolved → a tie at the top.
    far = [v - 10 for v in LEADER]
    summary, crowded = evaluated({"lead": LEADER, "second": SECOND, "low": far,
                                  "low2": [v - 10 for v in LEADER]})
    borderline = crowded.best.against("second")
    assert borderline.gap.p == pair.gap.p and borderline.p_holm == pytest.approx(2 * pair.gap.p)
    assert not borderline.resolved
    assert crowded.best.top == ("lead", "second") and crowded.best.winner is None
    assert "lead and second are indistinguishable here (Δ +0.4 pp" in answer(summary, crowded)
    assert "about " in answer(summary, crowded)


def test_a_contender_more_accurate_on_average_is_tied_with_the_leader_it_is_not_separated_from():
    # "wide" gains 8 points on 8 clients and loses 2 clients (QoI −1): it loses the vote (PUI,
    # PUD, MPD, APD go to lead) while 2.2 points more accurate on average. Per client the gaps
    # are +8 (8 times) and −21 (twice): W+ = 36, W− = 19, far from resolved → both are named.
    wide = [LEADER[c] + 8 for c in range(8)] + [GLOBAL[8] - 1, GLOBAL[9] - 1]
    summary, assessment = evaluated({"lead": LEADER, "wide": wide})
    assert summary.best.model == "lead" and summary.best.votes == {"lead": 4, "wide": 3}
    assert assessment.best.top == ("lead", "wide")
    (pair,) = assessment.best.pairs
    assert (pair.a, pair.b) == ("wide", "lead") and pair.gap.delta == pytest.approx(2.2)
    assert pair.gap.p == pytest.approx(stats.wilcoxon(np.subtract(wide, LEADER)).pvalue)
    assert "lead and wide are indistinguishable here (Δ −2.2 pp" in answer(summary, assessment)


def test_client_intervals_are_the_percentile_bootstrap_of_the_metric():
    summary, assessment = evaluated({"persfl": LEADER, "fedper": SECOND})
    interval = assessment.intervals["persfl"]["accuracy.AA"]
    means = [np.mean(np.array(LEADER)[idx]) for idx in client_resamples(K)]
    assert (interval.over, interval.n) == ("clients", K)
    assert (interval.low, interval.high) == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    # QoI metrics of a baseline have no value, hence no interval
    assert assessment.intervals["fedavg"]["performance.PUI"].low is None


def test_intervals_are_deterministic():
    first = evaluated({"persfl": LEADER, "fedper": SECOND})[1]
    second = evaluated({"persfl": LEADER, "fedper": SECOND})[1]
    assert first == second


def test_the_thesis_metrics_and_vote_are_unchanged_beside_the_verdicts():
    t = table({"persfl": LEADER, "fedper": LEADER})
    alone = summarize(t)["test"]
    split = build_report(t).to_json()["splits"]["test"]
    assert split["models"] == {m: r.to_json() for m, r in alone.models.items()}
    assert split["decisions"] == {"best": alone.best.to_json(),
                                  "fairest": alone.fairest.to_json()}


def test_pairwise_csv_and_mlflow_metrics_name_every_pair(tmp_path):
    t = table({"persfl": LEADER, "fedper": SECOND})
    report = build_report(t)
    files = write_report(report, tmp_path)
    rows = list(csv.DictReader(io.StringIO(files.pairwise.read_text())))
    assert [(r["question"], r["a"], r["b"]) for r in rows] == [
        ("best", "persfl", "fedper"), ("fairest", "persfl", "fedper")]
    assert float(rows[0]["p"]) == pytest.approx(2 * 19 / 2**10)
    tracked = tracked_metrics(report.uncertainty, report.metrics)
    assert tracked["pairwise.test.persfl_vs_fedper.AA.resolved"] == 1.0
    assert tracked["pairwise.test.persfl_vs_fedper.AA.p_holm"] == pytest.approx(0.037109375)
    low, high = tracked["persfl.test.AA.ci_low"], tracked["persfl.test.AA.ci_high"]
    assert low < report.splits["test"].models["persfl"].mean["performance.AA"] < high
    assert "persfl.test.improved.JI.ci_low" in tracked
    data = json.loads(files.json.read_text())
    assert data["best"] == "persfl" and data["verdicts"]["best"]["top"] == ["persfl"]
    assert data["splits"]["test"]["uncertainty"]["over"] == "clients"
    assert pairwise_csv(report.uncertainty) == files.pairwise.read_text()


def test_the_report_shows_the_pairwise_table_and_the_intervals_beside_the_thesis_tables():
    report = build_report(table({"persfl": LEADER, "fedper": SECOND}))
    text = report.to_markdown()
    assert "| best (accuracy) | persfl − fedper | +0.4 pp |" in text
    assert "### 95 % intervals" in text and "| AA ↑ |" in text
    assert "Holm-corrected over its pairs" in text
