"""benchmarks/results_tables.py: docs/results.md's tables from a run folder, numbers by hand."""

import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "tuned-digits.yaml"
FIELDS = ["seed", "client", "model", "split", "selection", "round", "accuracy", "loss",
          "n_samples", "scope", "steps", "samples", "bytes_sent", "bytes_received"]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location(
        "results_tables", REPO / "benchmarks" / "results_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(seed: int, model: str, best: list[float], last: list[float], steps: list[int],
         global_last: list[float] | None = None) -> list[dict]:
    out = []
    for client, (b, la, st) in enumerate(zip(best, last, steps, strict=True)):
        base = {"seed": seed, "client": client, "model": model, "split": "test", "round": 3,
                "loss": 0.5, "n_samples": 10, "steps": st, "samples": 20 * st,
                "bytes_sent": 1000, "bytes_received": 2000}
        out += [{**base, "selection": "best_val", "accuracy": b, "scope": ""},
                {**base, "selection": "last_round", "accuracy": la, "scope": ""},
                {**base, "split": "val", "selection": "best_val", "accuracy": 0.0, "scope": ""}]
        if global_last:
            out.append({**base, "selection": "last_round", "accuracy": global_last[client],
                        "scope": "global"})
    return out


@pytest.fixture
def run(tmp_path: Path) -> Path:
    for seed, (ditto_best, ditto_steps) in {0: ([0.8, 0.6], [10, 20]),
                                            1: ([0.9, 0.7], [30, 30])}.items():
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        with (folder / "results.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows(rows(seed, "fedavg", [0.5, 0.5], [0.4, 0.6], [5, 5]))
            writer.writerows(rows(seed, "ditto", ditto_best, [0.5, 0.5], ditto_steps,
                                  global_last=[0.6, 0.6]))
        (folder / "ditto").mkdir()
        (folder / "ditto" / "history.csv").write_text(
            "round,diag.local_steps\n1,\n2,4\n3,40\n" if seed == 0 else "round,diag.local_steps\n"
            "2,nan\n3,10\n")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.json").write_text(json.dumps({
        "run": {"data": "digits, ds2, 2 clients", "seeds": "0, 1", "rounds": "ditto 3 rounds"},
        "compute_warning": "Unequal compute: ditto ...",
        "tuning": {"seeds": [100, 101], "entries": {"ditto": {
            "grid": {"lam": [0.1, 1.0]}, "chosen": {"lam": 1.0}, "points": [
                {"values": {"lam": 0.1}, "scores": {"100": 0.5, "101": 0.7}, "mean": 0.6},
                {"values": {"lam": 1.0}, "scores": {"100": 0.8, "101": 0.6}, "mean": 0.7}]}}}}))
    return tmp_path


def line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def test_accuracy_and_compute_columns_are_client_means_and_sums_over_seeds(tables, run):
    text = tables.section(SPEC, run, "abc1234")
    # ditto, best-val: seed 0 (0.8 + 0.6)/2 = 0.70, seed 1 0.80 -> 75.0 ± stdev(70, 80) = 7.1;
    # last 50.0 ± 0.0; GA last 60.0; steps (10+20, 30+30) -> 45; samples 20× -> 0.9 k;
    # bytes: 2 clients × 1000 / 2000 -> 0.00 / 0.00 MB; tuned lam 1.0 in bold.
    # 95 % CI over the 2 seeds: 75 ± t_{0.975, 1} · 7.07 / √2 = 75 ± 12.706 · 5 = [11.5, 138.5]
    assert line(text, "| ditto |") == (
        "| ditto | lam **1.0**; from FedAvg's model (its compute not included) | 75.0 ± 7.1 "
        "| [11.5, 138.5] | 50.0 ± 0.0 | 60.0 ± 0.0 | 45 | 0.9 | 0.00 / 0.00 | 70.0 / 80.0 |")
    # FedAvg's scored model is its global model: GA = its last-round accuracy (0.4+0.6)/2.
    # The same on both seeds: no spread, so no interval (never a zero-width [50.0, 50.0]).
    assert line(text, "| fedavg |").split(" | ")[2:6] == ["50.0 ± 0.0", "—",
                                                          "50.0 ± 0.0", "50.0 ± 0.0"]


def test_pairwise_table_says_whether_the_gap_is_resolved(tables, run):
    text = tables.section(SPEC, run, "abc1234")
    # ditto − fedavg per seed: 0.2, 0.3 → Δ 25 pp; t = 0.25 / (0.0707 / √2) = 5 at 1 df, a
    # Cauchy: p = 1 − (2/π) atan 5 = 0.126; one pair, so Holm's p is the same. A third seed at
    # this spread would do (t at 2 df).
    p = 1 - 2 / math.pi * math.atan(5)
    assert f"{p:.2g}" == "0.13"
    assert line(text, "| ditto − fedavg |") == (
        "| ditto − fedavg | +25.0 pp | [−38.5, +88.5] | 0.13 | 0.13 | 2 seeds | paired t "
        "| indistinguishable | about 3 seeds |")
    folded = text.split("<details><summary>Every pair (1)</summary>")[1].split("</details>")[0]
    assert "| ditto − fedavg |" in folded  # the pairs fold away; the verdict below stays open
    assert ("Best mean: ditto; not separated from it: fedavg (Δ +25.0 pp, 95 % CI [−38.5, "
            "+88.5], p = 0.13, n = 2 seeds; about 3 seeds would settle it).") in text
    assert "**Reported seeds** 0, 1; **tuning seeds** 100, 101" in text
    assert "commit abc1234" in text
    assert "The report warns: Unequal compute" in text


def test_a_gap_by_design_is_a_note_not_a_warning(tables, run):
    path = run / "report" / "report.json"
    report = json.loads(path.read_text())
    path.write_text(json.dumps({**report, "compute_warning": "Compute by design: ditto ...",
                                "compute_by_design": True}))
    text = tables.section(SPEC, run, "abc1234")
    assert "The report notes: Compute by design: ditto ..." in text
    assert "warns" not in text


def test_tuning_table_marks_the_chosen_point_and_lists_every_seed(tables, run):
    text = tables.section(SPEC, run, "abc1234")
    assert line(text, "| ditto | lam 0.1 |") == "| ditto | lam 0.1 | 50.0 | 70.0 | 60.0 |  |"
    assert line(text, "| ditto | lam 1.0 |") == "| ditto | lam 1.0 | 80.0 | 60.0 | 70.0 | ✓ |"


def test_step_counts_read_the_history_where_eqn8_applied(tables, run):
    # client-rounds 4, 40 (seed 0) and 10 (seed 1); blanks and NaN are rounds it did not apply.
    assert tables.step_counts(run)[-2] == "| ditto | 4 | 10 | 18.0 | 40 | 3 |"


def test_write_replaces_only_its_own_section(tables, tmp_path):
    out = tmp_path / "results.md"
    begin = "<!-- benchmarks/results_tables.py: x begin -->"
    end = "<!-- benchmarks/results_tables.py: x end -->"
    out.write_text(f"before\n{begin}\nold\n{end}\nafter\n")
    tables.write(out, f"{begin}\nnew\n{end}", "x")
    assert out.read_text() == f"before\n{begin}\nnew\n{end}\nafter\n"
    tables.write(out, "<!-- benchmarks/results_tables.py: y begin -->\nY\n"
                      "<!-- benchmarks/results_tables.py: y end -->", "y")
    assert out.read_text().startswith(f"before\n{begin}\nnew\n{end}\nafter\n\n<!-- ")


def test_a_run_stopped_before_the_report_reads_the_seeds_and_the_kept_tuning(tables, run):
    import shutil

    shutil.rmtree(run / "report")
    (run / "seed-1" / "ditto" / "tuning.json").write_text(json.dumps({
        "seeds": [100, 101], "entries": {"ditto": {"chosen": {"lam": 0.1}, "points": [
            {"values": {"lam": 0.1}, "scores": {"100": 0.5, "101": 0.7}, "mean": 0.6}]}}}))
    text = tables.section(SPEC, run, "abc1234")
    assert "**Reported seeds** 0, 1; **tuning seeds** 100, 101" in text
    # the report's own Rounds line (a tuned entry counted with its choice; the local baseline)
    assert ("- Rounds: fedavg 20 rounds, local 20 epochs, ditto 20 + 20 warm-start rounds, "
            "fedprox 20 + 20 warm-start rounds, fedper 20 + 20 warm-start rounds.") in text
    assert line(text, "| ditto |").startswith("| ditto | lam **0.1**;")
    assert line(text, "| ditto | lam 0.1 |") == "| ditto | lam 0.1 | 50.0 | 70.0 | 60.0 | ✓ |"
