"""The report's compute table and its unequal-compute warning, on hand-made histories."""

from pflpipe.compute import in_all
from pflpipe.compute import totals as sums
from pflpipe.metrics import table_from_records
from pflpipe.report.report_writer import ReportContext, build_report


def _history(model, clients_per_round, rounds=3, samples=50):
    """Train rows of `clients_per_round` clients of 50 samples each round; 0.5 test accuracy."""
    rows = []
    for r in range(1, rounds + 1):
        for c in range(clients_per_round):
            rows.append({"seed": 0, "model": model, "round": r, "client": c, "split": "train",
                         "steps": 4, "samples": samples, "bytes_sent": 100,
                         "bytes_received": 100})
        rows.append({"seed": 0, "model": model, "round": r, "client": 0, "split": "test",
                     "accuracy": 0.5, "scope": ""})
    return rows


def test_totals_sum_clients_and_rounds():
    # 10 clients × 3 rounds × 50 samples = 1500; 1 client × 3 rounds × 50 = 150
    totals = sums.totals(_history("pfedvem", 10) + _history("pfedme", 1))

    assert totals["pfedvem"]["samples"] == 1500 and totals["pfedme"]["samples"] == 150
    assert totals["pfedvem"]["steps"] == 120 and totals["pfedme"]["bytes_sent"] == 300


def test_warning_fires_when_one_model_trains_all_clients_and_another_ten_percent():
    history = _history("pfedvem", 10) + _history("pfedme", 1) + _history("fedper", 9)

    warning = in_all.mismatch(sums.totals(history), ["local", "fedavg"], 1.5).text

    # pfedvem 1500 = 10× pfedme's 150; fedper 1350 = 9×
    assert warning.startswith("Unequal compute: pfedvem processed 10×, fedper processed 9× the "
                              "samples of pfedme, more than the 1.5× evaluation.compute_mismatch")


def test_no_warning_within_the_factor_and_the_baselines_are_not_compared():
    # 3 vs 2 clients: 1.5× exactly is allowed; the local baseline's 100× is not compared
    history = _history("a", 3) + _history("b", 2) + _history("local", 1, samples=5000)

    assert in_all.mismatch(sums.totals(history), ["local", "fedavg"], 1.5) is None
    assert in_all.mismatch(sums.totals(history), ["local", "fedavg"], 1.4) is not None


def test_report_shows_the_compute_table_and_the_warning_at_the_specs_factor():
    history = tuple(_history("pfedvem", 10) + _history("pfedme", 1))
    table = table_from_records([
        {"client": c, "model": m, "accuracy": 0.5 + 0.01 * c, "split": "test"}
        for c in range(3) for m in ("pfedvem", "pfedme", "local", "fedavg")])

    strict = build_report(table, context=ReportContext(history=history))
    loose = build_report(table, context=ReportContext(history=history, compute_mismatch=20.0))

    markdown = strict.to_markdown()
    assert "## Compute" in markdown
    assert "**Warning.** Unequal compute: pfedvem processed 10×" in markdown
    assert "| pfedvem | 120 | 1,500 |" in markdown
    assert strict.to_json()["compute"]["pfedme"]["samples"] == 150
    assert loose.compute_warning() is None and "**Warning.**" not in loose.to_markdown()
