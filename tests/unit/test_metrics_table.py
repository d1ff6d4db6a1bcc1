"""Reading and validating the per-client results table."""

from pathlib import Path

import pytest

from pflpipe.errors import DataError
from pflpipe.metrics import table_from_records
from pflpipe.metrics.results_table import scores_by_seed, select_rows
from pflpipe.report.results_reader import read_table


def write(tmp_path: Path, text: str, name: str = "results.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_read_table_fills_defaults_for_optional_columns(tmp_path):
    path = write(tmp_path, "client,model,accuracy\n0,local,0.5\n0,fedavg,0.6\n")
    table = read_table([path])
    row = table.rows[0]
    assert (row.seed, row.split, row.selection, row.loss, row.n_samples) == (0, "test", "", None,
                                                                             None)
    assert table.unit == "fraction"
    assert row.where == f"{path}:2"


def test_read_table_parses_optional_columns_and_ignores_unknown_ones(tmp_path):
    path = write(tmp_path, "seed,client,model,split,selection,round,accuracy,loss,n_samples,note\n"
                           "3,7,ditto,val,last_round,12,0.75,0.5,40,hello\n")
    row = read_table([path]).rows[0]
    assert (row.seed, row.client, row.model, row.split, row.selection, row.round, row.accuracy,
            row.loss, row.n_samples) == (3, "7", "ditto", "val", "last_round", 12, 0.75, 0.5, 40)


def test_read_table_detects_percent(tmp_path):
    path = write(tmp_path, "client,model,accuracy\n0,local,0\n1,local,85\n2,local,1.5\n")
    assert read_table([path]).unit == "percent"


def test_read_table_refuses_a_table_mixing_fractions_and_percent(tmp_path):
    path = write(tmp_path, "client,model,accuracy\n0,local,75\n1,local,0.8\n")
    with pytest.raises(DataError, match=r"results.csv:3: accuracy 0.8 looks like a fraction, but "
                                        r".*results.csv:2 has 75 \(percent\): the table mixes"):
        read_table([path])


def test_read_table_takes_the_unit_it_is_given(tmp_path):
    path = write(tmp_path, "client,model,accuracy\n0,local,75\n1,local,0.8\n")
    assert read_table([path], unit="percent").rows[1].accuracy == 0.8
    with pytest.raises(DataError, match=r":2: accuracy 75 is above 1; accuracies must be fract"):
        read_table([path], unit="fraction")


def test_read_table_refuses_percent_on_a_table_of_fractions(tmp_path):
    # Read as percent, 0.8 would be 0.8 % and every gap about +0.0 pp.
    path = write(tmp_path, "client,model,accuracy\n0,local,0.75\n1,local,0.8\n")
    with pytest.raises(DataError, match=r"results.csv:3: every accuracy is at most 1 \(the "
                                        r"largest, 0.8, is here\), so the table holds fractions"
                                        r".*Drop --unit percent"):
        read_table([path], unit="percent")


def test_read_table_reads_a_regression_table_as_negative_mse(tmp_path):
    path = write(tmp_path, "client,model,accuracy,loss\n0,local,nan,0.25\n1,local,,2\n")
    table = read_table([path])
    assert table.unit == "neg_mse"
    assert [row.accuracy for row in table.rows] == [-0.25, -2.0]


def test_read_table_names_a_regression_row_without_its_mse(tmp_path):
    path = write(tmp_path, "client,model,accuracy,loss\n0,local,nan,0.25\n1,local,nan,inf\n")
    with pytest.raises(DataError, match=r":3: loss \(the mean squared error of a regression\) must "
                                        r"be a finite number ≥ 0 \(got 'inf'\) for client 1"):
        read_table([path], unit="neg_mse")


def test_read_table_rejects_mixed_units_across_files(tmp_path):
    fractions = write(tmp_path, "client,model,accuracy\n0,local,0.5\n", "a.csv")
    percent = write(tmp_path, "client,model,accuracy\n0,fedavg,50\n", "b.csv")
    with pytest.raises(DataError, match=r"mix accuracy units: .*a.csv \(fraction\), .*b.csv "
                                        r"\(percent\)"):
        read_table([fractions, percent])


@pytest.mark.parametrize(("text", "message"), [
    ("client,model\n0,local\n", "missing column.*accuracy"),
    ("client,model,accuracy\n", "no rows"),
    ("client,model,accuracy\n0,local,abc\n", r"results.csv:2: accuracy must be a number"),
    ("client,model,accuracy\n0,local,-0.1\n", "finite number ≥ 0"),
    ("client,model,accuracy\n0,local,nan\n", "finite number ≥ 0.*no samples in this split"),
    ("client,model,accuracy\n0,local,120\n", "above 100"),
    ("client,model,accuracy\n,local,0.5\n", "client is empty"),
    ("client,model,accuracy,seed\n0,local,0.5,1.5\n", "seed must be an integer"),
    ("client,model,accuracy,selection\n0,local,0.5,best\n", "selection must be one of"),
    ("client,model,accuracy\n0,local,0.5\n0,local,0.6\n", r"results.csv:3: repeats .*:2"),
])
def test_read_table_rejects_bad_input_naming_the_line(tmp_path, text, message):
    with pytest.raises(DataError, match=message):
        read_table([write(tmp_path, text)])


def test_read_table_names_a_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such results table"):
        read_table([tmp_path / "absent.csv"])


def records(models: dict[str, list[float]], **extra) -> list[dict]:
    return [{"client": c, "model": m, "accuracy": a, **extra}
            for m, accs in models.items() for c, a in enumerate(accs)]


def test_scores_by_seed_orders_clients_numerically():
    rows = [{"client": c, "model": "local", "accuracy": 0.5} for c in ("10", "2", "1")]
    scores = scores_by_seed(table_from_records(rows).rows, "test", ("local",))
    assert scores[0].clients == ("1", "2", "10")


def test_scores_by_seed_names_the_client_missing_a_baseline():
    table = table_from_records(records({"local": [0.5, 0.6], "fedavg": [0.5], "x": [0.7, 0.8]},
                                       seed=4, split="val"))
    with pytest.raises(DataError, match=r"split 'val', seed 4: client 1 has no row for baseline "
                                        r"model 'fedavg'"):
        scores_by_seed(table.rows, "val", ("local", "fedavg"))


def test_scores_by_seed_names_the_model_missing_a_client():
    table = table_from_records(records({"local": [0.5, 0.6], "fedavg": [0.5, 0.5], "x": [0.7]}))
    with pytest.raises(DataError, match=r"seed 0: client 1 has no row for model 'x'"):
        scores_by_seed(table.rows, "test", ("local", "fedavg"))


def test_scores_by_seed_names_an_absent_baseline_and_the_models_present():
    table = table_from_records(records({"fedavg": [0.5], "x": [0.7]}))
    with pytest.raises(DataError, match=r"baseline model 'local' has no rows \(models present: "
                                        r"fedavg, x\)"):
        scores_by_seed(table.rows, "test", ("local", "fedavg"))


def test_scores_by_seed_names_a_model_absent_from_one_seed():
    rows = records({"local": [0.5], "fedavg": [0.5], "x": [0.7]}, seed=0)
    rows += records({"local": [0.5], "fedavg": [0.5]}, seed=1)
    with pytest.raises(DataError, match=r"seed 1: model 'x' has no rows"):
        scores_by_seed(table_from_records(rows).rows, "test", ("local", "fedavg"))


def test_select_rows_keeps_the_chosen_selection_and_rows_without_one():
    rows = records({"x": [0.7]}, selection="best_val") + records({"x": [0.6]},
                                                                 selection="last_round")
    rows += records({"local": [0.5]}, selection="")
    kept = select_rows(table_from_records(rows), "last_round")
    assert sorted((r.model, r.accuracy) for r in kept) == [("local", 0.5), ("x", 0.6)]


def test_select_rows_says_which_selections_exist():
    table = table_from_records(records({"x": [0.7]}, selection="last_round"))
    with pytest.raises(DataError, match=r"no row has selection 'best_val' \(present: "
                                        r"last_round\)"):
        select_rows(table, "best_val")
