"""Generalized vs personalized accuracy: GA, PA and the % of clients whose PA beats GA."""

import json

import pytest

from pflpipe.errors import DataError
from pflpipe.metrics import METRIC_REGISTRY, table_from_records
from pflpipe.metrics.generalization import compare, percent_beats_global, personalization_gain
from pflpipe.report.report_writer import build_report, write_report
from pflpipe.report.results_reader import read_table
from pflpipe.stages import evaluate_fairness


def _rows(model, accuracies, scope="", seed=0):
    return [{"seed": seed, "client": c, "model": model, "split": "test", "selection": "best_val",
             "accuracy": a, "scope": scope} for c, a in enumerate(accuracies)]


def _table():
    # ditto: PA [0.9, 0.6, 0.7, 0.8], GA [0.8, 0.7, 0.7, 0.5] → gains [0.1, −0.1, 0, 0.3]:
    # 2 of 4 clients beat GA (the tie does not) = 50 %; GA mean 0.675, PA mean 0.75.
    return table_from_records(
        _rows("local", [0.5, 0.5, 0.5, 0.5]) + _rows("fedavg", [0.6, 0.6, 0.6, 0.7])
        + _rows("ditto", [0.9, 0.6, 0.7, 0.8]) + _rows("ditto", [0.8, 0.7, 0.7, 0.5], "global"))


def test_percent_beats_global_counts_strict_gains_only():
    gain = personalization_gain([0.9, 0.6, 0.7, 0.8], [0.8, 0.7, 0.7, 0.5])

    assert percent_beats_global(gain) == 50.0
    assert METRIC_REGISTRY["beats_global"].higher_is_better
    assert METRIC_REGISTRY["beats_global"].compute([]) == (
        None, "beats_global is undefined on an empty set of clients")


def test_personalization_gain_needs_one_value_per_client_each():
    with pytest.raises(ValueError, match="one value per client"):
        personalization_gain([0.5, 0.6], [0.5])


def test_compare_gives_ga_pa_and_share_per_model_with_baselines_one_sided():
    comparisons = compare(_table())["test"]

    assert list(comparisons) == ["fedavg", "ditto", "local"]
    ditto = comparisons["ditto"].mean
    assert ditto["GA"] == pytest.approx(0.675) and ditto["PA"] == pytest.approx(0.75)
    assert ditto["beats_global"] == 50.0
    assert comparisons["fedavg"].mean == {"GA": pytest.approx(0.625), "PA": None,
                                          "beats_global": None}
    assert comparisons["local"].mean == {"GA": None, "PA": 0.5, "beats_global": None}


def test_compare_averages_over_seeds_with_sample_std():
    # seed 1: ditto PA [1, 1, 1, 1] vs GA [0.5 …] → 100 %; seed 0 gives 50 %: mean 75, std √1250
    table = table_from_records(
        _rows("ditto", [0.9, 0.6, 0.7, 0.8]) + _rows("ditto", [0.8, 0.7, 0.7, 0.5], "global")
        + _rows("ditto", [1.0] * 4, seed=1) + _rows("ditto", [0.5] * 4, "global", seed=1))

    ditto = compare(table)["test"]["ditto"]

    assert ditto.mean["beats_global"] == 75.0
    assert ditto.std["beats_global"] == pytest.approx(1250 ** 0.5)


def test_read_table_keeps_global_rows_apart_from_the_personalized_metrics(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("client,model,accuracy,scope\n0,ditto,0.9,\n0,ditto,0.8,global\n"
                    "0,local,0.5,\n0,fedavg,0.6,\n")

    report = build_report(read_table([path]))

    assert report.splits["test"].models["ditto"].mean["accuracy.AA"] == 0.9
    assert report.comparisons["test"]["ditto"].mean["GA"] == 0.8


@pytest.mark.parametrize(("text", "message"), [
    ("client,model,accuracy,scope\n0,ditto,0.9,Global!\n", r"results.csv:2: scope must be empty"),
    ("client,model,accuracy,scope\n0,ditto,0.9,global\n0,ditto,0.8,global\n",
     r"results.csv:3: repeats .*scope 'global'"),
])
def test_read_table_rejects_bad_scopes(tmp_path, text, message):
    path = tmp_path / "results.csv"
    path.write_text(text)

    with pytest.raises(DataError, match=message):
        read_table([path])


def test_report_shows_and_tracks_the_comparison(tmp_path):
    report = build_report(_table())

    files = write_report(report, tmp_path / "report")
    data = json.loads(files.json.read_text())
    tracked = evaluate_fairness.tracked_metrics(report)

    assert data["splits"]["test"]["generalization"]["ditto"]["beats_global"] == 50.0
    assert "| ditto | 0.6750 | 0.7500 | 50.0 |" in files.markdown.read_text()
    assert tracked["ditto.test.GA"] == pytest.approx(0.675)
    assert tracked["ditto.test.beats_global"] == 50.0
    assert "fedavg.test.PA" not in tracked and tracked["fedavg.test.GA"] == pytest.approx(0.625)


def test_report_without_global_rows_has_no_comparison_table(tmp_path):
    table = table_from_records(_rows("local", [0.5]) + _rows("fedavg", [0.6])
                               + _rows("ditto", [0.9]))

    files = write_report(build_report(table), tmp_path / "report")

    assert "Generalized vs personalized" not in files.markdown.read_text()
