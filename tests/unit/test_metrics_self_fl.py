"""Self-FL's user metrics (Table 1): accuracy of the 10% largest clients and of the worst 10%."""

import numpy as np
import pytest

from pflpipe.metrics import METRIC_REGISTRY, summarize, table_from_records
from pflpipe.metrics.metric_registry import UndefinedMetricError
from pflpipe.metrics.performance import bottom_decile_mean, top_samples_decile
from pflpipe.report.report_writer import build_report


def test_top_samples_decile_weighs_the_largest_tenth_by_their_samples():
    # K = 21 → ⌈2.1⌉ = 3 largest: 50 samples at 0.6, 30 at 1.0, 20 at 0.5:
    # (30 + 30 + 10) / 100 = 0.7
    values = np.array([[0.6, 50], [1.0, 30], [0.5, 20]] + [[0.0, 10]] * 18)

    assert top_samples_decile(values) == pytest.approx(0.7)


def test_top_samples_decile_ignores_client_order_and_ranks_ties_less_accurate_first():
    # Two clients of 40 samples compete for the one place (K = 10): 0.2 is taken, not 0.9.
    values = np.array([[0.9, 40], [0.2, 40]] + [[1.0, 5]] * 8)
    rng = np.random.default_rng(0)

    results = {top_samples_decile(values[rng.permutation(10)]) for _ in range(5)}

    assert results == {0.2}


def test_top_samples_decile_rejects_values_without_sample_counts():
    with pytest.raises(ValueError, match=r"needs \[K, 2\] \(accuracy, n_samples\)"):
        top_samples_decile(np.array([0.5, 0.6]))
    with pytest.raises(UndefinedMetricError, match="largest clients hold no samples"):
        top_samples_decile(np.array([[0.5, 0.0], [0.6, 0.0]]))


def test_worst_tenth_is_the_bottom_decile_mean_unweighted():
    # Self-FL's "worst 10% user avg acc": the plain mean of the ⌈K/10⌉ lowest accuracies.
    assert METRIC_REGISTRY["bottom_decile"].fn is bottom_decile_mean
    assert bottom_decile_mean(np.array([0.9] * 10 + [0.1, 0.3])) == pytest.approx(0.2)
    assert METRIC_REGISTRY["top_samples_decile"].higher_is_better


def _records(with_counts=True):
    """Ten clients; fedavg 0.5 everywhere; self_fl 0.9 on the two largest, 0.4 elsewhere."""
    rows = []
    for client in range(10):
        n = {0: 60, 1: 40}.get(client, 10)
        for model, accuracy in (("fedavg", 0.5), ("local", 0.3),
                                ("self_fl", 0.9 if client < 2 else 0.4)):
            rows.append({"client": client, "model": model, "accuracy": accuracy,
                         **({"n_samples": n} if with_counts else {})})
    return rows


def test_summary_reports_both_user_metrics_for_every_model():
    summary = summarize(table_from_records(_records()))["test"]

    top = {m: r.mean["accuracy.top_samples_decile"] for m, r in summary.models.items()}
    worst = {m: r.mean["accuracy.bottom_decile"] for m, r in summary.models.items()}
    assert top == pytest.approx({"fedavg": 0.5, "local": 0.3, "self_fl": 0.9})
    assert worst == pytest.approx({"fedavg": 0.5, "local": 0.3, "self_fl": 0.4})


def test_summary_without_sample_counts_says_why_the_top_decile_is_missing():
    summary = summarize(table_from_records(_records(with_counts=False)))["test"]

    result = summary.models["self_fl"]
    assert result.mean["accuracy.top_samples_decile"] is None
    assert result.reasons["accuracy.top_samples_decile"] == (
        "the results table gives no n_samples for every client")


def test_report_lists_the_top_decile_among_the_accuracy_summaries():
    report = build_report(table_from_records(_records()))

    markdown = report.to_markdown()
    assert "| top_samples_decile ↑ | 0.3000 | 0.5000 | **0.9000** |" in markdown
    assert report.to_json()["splits"]["test"]["models"]["self_fl"]["accuracy"][
        "top_samples_decile"] == pytest.approx(0.9)
