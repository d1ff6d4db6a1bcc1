"""Intervals beside the report's means and answers gated by the Holm-corrected paired tests."""

import csv
import io
import json

import numpy as np
import pytest
from scipy import stats

from pflpipe.metrics import summarize, table_from_records
from pflpipe.metrics.pairwise import assess
from pflpipe.metrics.uncertainty import client_resamples
from pflpipe.report.pairwise_section import answer, pairwise_csv, tracked_metrics
from pflpipe.report.report_writer import build_report, write_report

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


def test_identical_models_have_no_interval_and_no_winner():
    summary, assessment = evaluated({"fedper": LEADER, "persfl": LEADER})
    verdict = assessment.best
    assert summary.best.model == "fedper"  # the vote, tied, breaks by name
    assert verdict.top == ("fedper", "persfl") and verdict.winner is None
    (pair,) = verdict.pairs
    assert (pair.gap.delta, pair.gap.p, pair.p_holm, pair.resolved) == (0.0, 1.0, 1.0, False)
    assert (pair.low, pair.high) == (None, None)  # never a zero-width [+0.0, +0.0]
    assert answer(summary, assessment).startswith(
        "Best performing on test: no winner from one training seed: over these 10 clients "
        "fedper and persfl are not separated (fedper vs persfl: Δ +0.0 pp, n = 10 clients; no "
        "interval and no test: every one of the 10 clients shows the same gap (+0): its spread "
        "cannot be estimated); but training noise was not measured (one seed")


def test_identical_models_are_indistinguishable_over_seeds():
    summary, assessment = evaluated({"fedper": LEADER, "persfl": LEADER}, seeds=(0, 1, 2))
    (pair,) = assessment.best.pairs
    assert (pair.gap.over, pair.gap.n, pair.gap.test, pair.resolved) == (
        "seeds", 3, "paired t", False)
    assert assessment.best.top == ("fedper", "persfl") and assessment.best.status == "tied"
    assert "every one of the 3 seeds shows the same gap (+0)" in answer(summary, assessment)


def test_a_consistent_gap_over_one_seeds_clients_names_no_winner():
    # persfl ahead on every client by 4.1, 4.2, ..., 5.0: the signed-rank p is 2 / 2^10; the
    # Walsh averages are 4.1 + 0.05 (i + j), i ≤ j; P(T⁺ ≤ 8) = 0.0244 < 0.025 < P(T⁺ ≤ 9), so
    # the interval is the 9th smallest and largest of the 55 averages: [4.3, 4.8].
    worse = [v - 4.1 - 0.1 * c for c, v in enumerate(LEADER)]
    summary, assessment = evaluated({"persfl": LEADER, "fedper": worse})
    (pair,) = assessment.best.pairs
    assert pair.gap.p == 2 / 2**10 and pair.resolved and pair.ahead == "persfl"
    assert pair.gap.delta == pytest.approx(4.55)   # Hodges–Lehmann: the median average
    assert (pair.low, pair.high) == pytest.approx((4.3, 4.8))
    verdict = assessment.best
    assert verdict.winner is None and verdict.status == "training noise not measured"
    assert verdict.top == ("persfl", "fedper") and verdict.ahead_over_clients == "persfl"
    text = answer(summary, assessment)
    assert text.startswith(
        "Best performing on test: no winner from one training seed: over these 10 clients the "
        "corrected paired test puts persfl ahead of fedper (Δ +4.5 pp, 95 % CI [+4.3, +4.8], "
        "p = 0.002, n = 10 clients); but training noise was not measured (one seed: the test "
        "over its clients treats them as the only noise); 3 or more seeds (experiment.seeds) "
        "would measure it; by the thesis's seven criteria alone it would be persfl (")
    assert "resolved" not in text


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
    assert (pair.low, pair.high) == pytest.approx(
        stats.t.interval(0.95, 2, loc=np.mean(d), scale=stats.sem(d)))
    assert "resolved: the corrected paired test puts it ahead of fedper" in answer(
        summaries["test"], assessment)
    # persfl's AA is the same on every seed: no spread, so no interval (never [84.5, 84.5]).
    interval = assessment.intervals["persfl"]["accuracy.AA"]
    assert (interval.over, interval.n, interval.low, interval.high) == ("seeds", 3, None, None)
    assert "no spread" in interval.reason


def test_holm_changes_a_borderline_comparison_and_its_interval_level():
    # Alone, the leader beats the second at p = 0.037 over the clients, and its 95 % interval
    # (the signed-rank one) excludes 0.
    summary, alone = evaluated({"lead": LEADER, "second": SECOND})
    (pair,) = alone.best.pairs
    assert pair.gap.p == pytest.approx(2 * 19 / 2**10) and pair.resolved
    assert pair.alpha == 0.05 and pair.low > 0
    assert alone.best.ahead_over_clients == "lead" and alone.best.winner is None
    # With two more models (far below both, tied with each other) there are 6 pairs; Holm
    # doubles the borderline p (4 smaller ones come first): 0.074, unresolved; Holm stopped at
    # its step (α / 2), where the interval includes 0.
    far = [v - 10 + 0.1 * (c % 3) for c, v in enumerate(LEADER)]
    summary, crowded = evaluated({"lead": LEADER, "second": SECOND, "low": far,
                                  "low2": [v - 10.05 for v in far]})
    borderline = crowded.best.against("second")
    assert borderline.gap.p == pair.gap.p and borderline.p_holm == pytest.approx(2 * pair.gap.p)
    assert not borderline.resolved and borderline.alpha == 0.025
    assert borderline.low < 0 < borderline.high
    assert crowded.best.top[:2] == ("lead", "second") and crowded.best.winner is None
    assert crowded.best.ahead_over_clients is None
    text = answer(summary, crowded)
    assert "lead vs second: Δ +0.5 pp, 97.5 % (Holm) CI [" in text and "about " in text


def test_a_contender_more_accurate_on_average_is_not_separated_from_the_leader():
    # "wide" gains 8 points on 8 clients and loses 2 clients (QoI −1): it loses the vote (PUI,
    # PUD, MPD, APD go to lead) while 2.2 points more accurate on average. Per client the gaps
    # are +8 (8 times) and −21 (twice): of the 55 Walsh averages 36 are +8, 16 are −6.5 and 3
    # are −21, so the Hodges–Lehmann Δ is +8 and 19 averages lie below 0: p = 2 P(T⁺ ≤ 19).
    wide = [LEADER[c] + 8 for c in range(8)] + [GLOBAL[8] - 1, GLOBAL[9] - 1]
    summary, assessment = evaluated({"lead": LEADER, "wide": wide})
    assert summary.best.model == "lead" and summary.best.votes == {"lead": 4, "wide": 3}
    assert assessment.best.top == ("lead", "wide")
    (pair,) = assessment.best.pairs
    assert (pair.a, pair.b) == ("wide", "lead") and pair.gap.delta == pytest.approx(8.0)
    null = [sum(1 for signs in range(2**10) if sum(r + 1 for r in range(10)
                                                  if signs >> r & 1) <= 19)]
    assert pair.gap.p == pytest.approx(2 * null[0] / 2**10)
    assert not pair.resolved and pair.low < 0 < pair.high
    assert "lead vs wide: Δ −8.0 pp" in answer(summary, assessment)


def test_a_lone_personalized_model_has_nothing_to_compare_but_the_baselines():
    spread = [v + 0.3 * (c % 4) for c, v in enumerate(LEADER)]
    summary, assessment = evaluated({"ditto": spread})
    for verdict in (assessment.best, assessment.fairest):
        assert (verdict.status, verdict.top, verdict.winner, verdict.pairs) == (
            "nothing to compare", (), None, ())
    assert [(p.a, p.b) for p in assessment.baselines] == [("ditto", "fedavg"), ("ditto", "local")]
    assert all(p.gap.p == 2 / 2**10 and p.ahead == "ditto" for p in assessment.baselines)
    text = answer(summary, assessment)
    assert text.startswith("Best performing on test: nothing to compare: ditto is the only "
                           "personalized model, so no model is compared with it; against the "
                           "baselines: fedavg (Δ +20.4 pp, 97.5 % (Holm) CI [+20.0, +20.8], "
                           "p = 0.0039, n = 10 clients); local (Δ +30.4 pp, 95 % CI [")
    assert "wins" not in text and "resolved" not in text


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
        ("best", "persfl", "fedper"), ("fairest", "persfl", "fedper"),
        ("baselines", "fedper", "fedavg"), ("baselines", "fedper", "local"),
        ("baselines", "persfl", "fedavg"), ("baselines", "persfl", "local")]
    assert {r["training_noise"] for r in rows} == {"not measured"}
    assert float(rows[0]["p"]) == pytest.approx(2 * 19 / 2**10)
    tracked = tracked_metrics(report.uncertainty, report.metrics)
    assert tracked["pairwise.test.persfl_vs_fedper.AA.separated_over_clients"] == 1.0
    assert "pairwise.test.persfl_vs_fedper.AA.resolved" not in tracked  # one seed resolves none
    assert tracked["pairwise.test.persfl_vs_fedper.AA.p_holm"] == pytest.approx(0.037109375)
    low, high = tracked["persfl.test.AA.ci_low"], tracked["persfl.test.AA.ci_high"]
    assert low < report.splits["test"].models["persfl"].mean["performance.AA"] < high
    assert "fedper.test.improved.JI.ci_low" in tracked
    assert "persfl.test.improved.JI.ci_low" not in tracked  # QoI 20 on every client: JI 1 always
    data = json.loads(files.json.read_text())
    # One seed: no winner; every contender at the top, the clients' view beside it.
    assert data["best"] is None and data["verdicts"]["best"]["top"] == ["persfl", "fedper"]
    assert data["verdicts"]["best"]["ahead_over_clients"] == "persfl"
    assert data["splits"]["test"]["uncertainty"]["over"] == "clients"
    assert pairwise_csv(report.uncertainty) == files.pairwise.read_text()


def test_the_report_shows_the_pairwise_table_and_the_intervals_beside_the_thesis_tables():
    report = build_report(table({"persfl": LEADER, "fedper": SECOND}))
    text = report.to_markdown()
    assert "| best (accuracy) | persfl − fedper | +0.5 pp |" in text
    assert "| vs baseline (accuracy) | persfl − fedavg |" in text
    assert "### 95 % intervals" in text and "| AA ↑ |" in text
    assert "Holm-corrected over its pairs" in text
