"""Per-model metrics, mean ± std over seeds, and the best/fairest rule."""

import math

import pytest

from pflpipe.errors import DataError
from pflpipe.metrics import summarize, table_from_records
from pflpipe.metrics.summary import PATHS

# Thesis Table 6.2 (CIFAR-10, per-user accuracy in percent, averaged over 5 runs), DS-1..DS-3 for
# FedAvg, PersFL, FedPer, pFedMe, Per-FedAvg. The thesis does not list the local models; a local
# baseline 10 points below FedAvg makes max(G, L) = G, which reproduces Table 6.8.
TABLE_6_2 = """\
43.6 50.8 48.2 85.5 61.3 94.5 83.2 57.2 93.1 74.3 61.7 94.2 69.2 58.2 92.5
50.9 45.3 40.8 78.2 56.9 79.9 74.5 51.4 77 64.1 57.3 79.2 65 56.1 73.7
44.5 49.4 31.2 82.2 57.3 68.9 78.4 53.2 64.7 69.6 57.3 64.4 67.9 57.2 64.6
51.3 46.5 31.5 82.1 60.1 82.5 77.9 55.4 77.5 69.4 58.9 72.5 67.2 58.8 77
45.3 50.8 49.4 79.4 59.1 82.5 76.1 54.4 78.6 67.2 59.5 80 65.8 59.4 82.5
44.2 50.7 47.8 77.1 61.9 79.9 72.1 57.6 76.9 62.1 60.6 77.5 62.7 59.3 77.9
35.8 46.5 56.8 75.6 58.9 90.3 70.9 53.3 88.5 59.9 58.6 88.3 58.2 57.7 89.1
37.9 49.5 58.1 79.7 61.2 87.6 75.6 56.9 84.6 65.8 60.2 84 64.3 58 83.7
47.7 48.7 49 87.7 60 76.7 84.4 57.5 73.5 75.5 59.6 66.9 72.5 55.8 64.1
48.6 49.1 53.5 91 58.8 80.3 88.5 54.3 77.9 81.7 58.3 73.8 76.6 55.3 72.7
"""
MODELS = ("fedavg", "persfl", "fedper", "pfedme", "per_fedavg")


def thesis_rows(ds: int) -> list[dict]:
    rows = []
    for client, line in enumerate(TABLE_6_2.splitlines()):
        values = [float(v) for v in line.split()]
        for m, model in enumerate(MODELS):
            rows.append({"client": client, "model": model, "accuracy": values[3 * m + ds - 1]})
        rows.append({"client": client, "model": "local", "accuracy": values[ds - 1] - 10})
    return rows


def test_summary_reproduces_thesis_table_6_8_on_cifar10_ds1():
    split = summarize(table_from_records(thesis_rows(1)))["test"]
    persfl = split.models["persfl"].mean
    # Table 6.8, DS-1, PersFL: PUI 100, MPI 38.74, API 36.87, AA 81.85 (the thesis averages per
    # run before rounding; from the rounded Table 6.2 the median is (37.7 + 39.8) / 2 = 38.75).
    assert persfl["performance.PUI"] == 100.0
    assert persfl["performance.MPI"] == pytest.approx(38.75, abs=1e-9)
    assert persfl["performance.API"] == pytest.approx(36.87, abs=1e-9)
    assert persfl["performance.AA"] == pytest.approx(81.85, abs=1e-9)
    # Table 6.2's Std Dev row: 4.9 for PersFL, 5.1 for FedAvg.
    assert round(persfl["accuracy.std"], 1) == 4.9
    assert round(split.models["fedavg"].mean["accuracy.std"], 1) == 5.1
    # Table 6.8, FedPer DS-1: MPI 34.53 → 34.5 here, API 33.18.
    assert split.models["fedper"].mean["performance.API"] == pytest.approx(33.18, abs=1e-9)


@pytest.mark.parametrize(("ds", "best", "fairest"), [
    (1, "persfl", "persfl"),    # §6.9: PersFL fairest by a majority, Per-FedAvg lowest AV
    (2, "persfl", "pfedme"),    # Remark 1: PersFL performs best, pFedMe is fairer
    (3, "persfl", "persfl"),    # Remark 3: PersFL both; FedPer has the lowest AV
])
def test_summary_answers_the_thesis_questions_on_cifar10(ds, best, fairest):
    split = summarize(table_from_records(thesis_rows(ds)))["test"]
    assert (split.best.model, split.fairest.model) == (best, fairest)


def test_summary_reproduces_remark_2_lowest_av_is_not_fairest_on_ds1():
    split = summarize(table_from_records(thesis_rows(1)))["test"]
    assert split.fairest.winners["fairness.improved.AV"] == ["per_fedavg"]
    assert split.fairest.votes == {"fedper": 0, "per_fedavg": 1, "persfl": 3, "pfedme": 0}


def test_summary_says_when_best_and_fairest_differ():
    answer = summarize(table_from_records(thesis_rows(2)))["test"].answer()
    assert "not the fairest (pfedme)" in answer and "Remark 1" in answer


# A hand-made case, percent. QoI of "a" = a − max(fedavg, local):
#   seed 0: clients 0..3: 70−60=10, 50−60=−10, 80−60=20, 60−60=0
#   seed 1: 65−60=5, 62−60=2, 60−60=0, 58−60=−2
HAND = {
    0: {"local": [50, 60, 40, 60], "fedavg": [60, 55, 60, 50], "a": [70, 50, 80, 60]},
    1: {"local": [50, 60, 40, 60], "fedavg": [60, 55, 60, 50], "a": [65, 62, 60, 58]},
}


def hand_rows() -> list[dict]:
    return [{"seed": s, "client": c, "model": m, "accuracy": v}
            for s, models in HAND.items() for m, accs in models.items()
            for c, v in enumerate(accs)]


def test_summary_computes_each_metric_per_seed_then_mean_and_std():
    a = summarize(table_from_records(hand_rows()))["test"].models["a"]
    # PUI: seed 0 2/4 = 50, seed 1 2/4 = 50 → 50 ± 0.
    assert (a.mean["performance.PUI"], a.std["performance.PUI"]) == (50.0, 0.0)
    # MPI: seed 0 median(10, 20) = 15, seed 1 median(5, 2) = 3.5 → mean 9.25,
    # sample std sqrt(((15 − 9.25)² + (3.5 − 9.25)²) / 1) = 5.75 · sqrt 2.
    assert a.mean["performance.MPI"] == 9.25
    assert a.std["performance.MPI"] == pytest.approx(5.75 * math.sqrt(2), rel=1e-12)
    # APD: −10 and −2 → −6.
    assert a.mean["performance.APD"] == -6.0
    # AA: seed 0 65, seed 1 61.25 → 63.125.
    assert a.mean["performance.AA"] == a.mean["accuracy.AA"] == 63.125
    # JI of QoI over U⁺: seed 0 [10, 20] → 900 / (2 · 500) = 0.9; seed 1 [5, 2] → 49 / 58.
    assert a.mean["fairness.improved.JI"] == pytest.approx((0.9 + 49 / 58) / 2, rel=1e-12)
    # |QoI| over U⁻ is a single client per seed → JI 1, AV 0.
    assert a.mean["fairness.decreased.JI"] == 1.0 and a.mean["fairness.decreased.AV"] == 0.0
    # Per client, the mean over seeds: client 0 (70 + 65) / 2.
    assert a.per_client_accuracy["0"] == 67.5 and a.per_client_qoi["1"] == -4.0


def test_summary_gives_baselines_accuracy_metrics_and_reasons_for_the_rest():
    local = summarize(table_from_records(hand_rows()))["test"].models["local"]
    assert local.role == "local baseline"
    assert local.mean["accuracy.AA"] == 52.5 and local.mean["performance.AA"] == 52.5
    assert local.mean["performance.PUI"] is None
    assert "QoI is measured against the baselines" in local.reasons["performance.PUI"]
    # Fairness on accuracies: [50, 60, 40, 60], mean 52.5, AV (6.25 + 56.25 + 156.25 + 56.25) / 4.
    assert local.mean["fairness.accuracy.AV"] == 68.75


def test_summary_reason_accompanies_every_null():
    for split in summarize(table_from_records(hand_rows())).values():
        for result in split.models.values():
            assert set(PATHS) == set(result.mean)
            nulls = {p for p, v in result.mean.items() if v is None}
            assert nulls <= set(result.reasons)
            assert nulls or result.is_personalized


def test_summary_nulls_decrease_metrics_with_a_reason_when_no_client_lost():
    rows = [{"client": c, "model": m, "accuracy": v} for c, (lo, g, p) in
            enumerate([(0.5, 0.6, 0.7), (0.4, 0.5, 0.5)]) for m, v in
            (("local", lo), ("fedavg", g), ("x", p))]
    x = summarize(table_from_records(rows))["test"].models["x"]
    assert x.mean["performance.MPD"] is None and x.mean["fairness.decreased.JI"] is None
    assert x.reasons["performance.MPD"] == "U⁻ is empty: no client lost accuracy against max(G, L)"
    assert x.reasons["fairness.decreased.JI"].startswith("U⁻ is empty")


def test_summary_notes_seeds_where_a_metric_is_undefined():
    rows = hand_rows()
    # Seed 1 of "a": every client improves, so MPD is defined on seed 0 only.
    for row in rows:
        if row["seed"] == 1 and row["model"] == "a":
            row["accuracy"] = 90
    a = summarize(table_from_records(rows))["test"].models["a"]
    assert a.mean["performance.MPD"] == -10.0 and a.std["performance.MPD"] is None
    assert a.reasons["performance.MPD"].startswith("undefined for seed(s) 1 (U⁻ is empty")


def test_summary_answers_per_split_and_uses_the_selection():
    rows = [{"split": split, "selection": sel, "client": c, "model": m, "accuracy": v}
            for split in ("val", "test") for sel in ("best_val", "last_round")
            for c in range(2) for m, v in (("local", 0.5), ("fedavg", 0.5),
                                           ("x", 0.9 if sel == "best_val" else 0.6),
                                           ("y", 0.7))]
    best_val = summarize(table_from_records(rows))
    assert list(best_val) == ["test", "val"]
    assert best_val["val"].best.model == "x"
    assert summarize(table_from_records(rows), selection="last_round")["test"].best.model == "y"


def test_summary_breaks_a_tie_in_wins_by_average_accuracy():
    # Both improve every client over max(G, L) = 0.5.
    # x: accuracies [0.75, 0.75] → QoI [0.25, 0.25] (perfectly even), AA 0.75.
    # y: accuracies [0.75, 0.875] → QoI [0.25, 0.375], AA 0.8125.
    rows = [{"client": c, "model": m, "accuracy": v} for c in range(2)
            for m, v in (("local", 0.5), ("fedavg", 0.5), ("x", 0.75),
                         ("y", 0.75 if c == 0 else 0.875))]
    split = summarize(table_from_records(rows))["test"]
    # Fairness: x wins AV, CS, Entropy, JI (equal QoI) → x is fairest outright.
    assert split.fairest.model == "x" and split.fairest.votes == {"x": 4, "y": 0}
    # Performance: tied on PUI, PUD, MPD, APD; y wins MPI, API, AA → y best.
    assert split.best.model == "y" and split.best.votes == {"x": 4, "y": 7}


def test_summary_breaks_equal_votes_by_aa_then_name():
    rows = [{"client": c, "model": m, "accuracy": v} for c in range(2)
            for m, v in (("local", 0.5), ("fedavg", 0.5), ("b", 0.75), ("a", 0.75))]
    split = summarize(table_from_records(rows))["test"]
    assert split.best.model == "a"
    assert "equal AA" in split.best.tie_break and "broken by name" in split.best.tie_break


def test_summary_without_personalized_models_answers_with_a_reason():
    rows = [{"client": 0, "model": m, "accuracy": 0.5} for m in ("local", "fedavg")]
    split = summarize(table_from_records(rows))["test"]
    assert split.best.model is None and "no personalized model" in split.best.reason
    assert "undecided" in split.answer()


def test_summary_fairest_is_undecided_when_no_model_improved_anyone():
    rows = [{"client": c, "model": m, "accuracy": v} for c in range(3)
            for m, v in (("local", 0.5), ("fedavg", 0.6), ("x", 0.4))]
    split = summarize(table_from_records(rows))["test"]
    assert split.best.model == "x"
    assert split.fairest.model is None and "U⁺ is empty for every model" in split.fairest.reason


def test_summary_accepts_other_baseline_names():
    rows = [{"client": 0, "model": m, "accuracy": v}
            for m, v in (("solo", 0.5), ("central", 0.6), ("x", 0.7))]
    split = summarize(table_from_records(rows), local="solo", global_="central")["test"]
    assert list(split.models) == ["solo", "central", "x"]
    assert split.models["x"].mean["performance.API"] == pytest.approx(0.1, rel=1e-12)


def test_summary_raises_when_a_client_misses_a_baseline():
    rows = [{"client": c, "model": m, "accuracy": 0.5} for c in range(2)
            for m in ("local", "fedavg", "x") if (c, m) != (1, "local")]
    with pytest.raises(DataError, match="client 1 has no row for baseline model 'local'"):
        summarize(table_from_records(rows))
