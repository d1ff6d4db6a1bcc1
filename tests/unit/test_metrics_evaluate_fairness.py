"""Stage evaluate_fairness: results directories in, report directory out."""

import csv
import json
from pathlib import Path

import pytest

from pflpipe.errors import DataError
from pflpipe.spec import Spec
from pflpipe.stages import evaluate_fairness
from pflpipe.tracking import NULL_TRACKER

COLUMNS = ["seed", "client", "model", "split", "selection", "round", "accuracy", "loss",
           "n_samples"]


def spec(**evaluation) -> Spec:
    return Spec.model_validate({"experiment": {"name": "t"}, "dataset": {"name": "digits"},
                                "partition": {"strategy": "ds1", "n_clients": 2},
                                "evaluation": evaluation})


def results_dir(tmp_path, model: str, accuracies: dict[str, list[float]]):
    """A results directory as a training stage writes it (docs/contracts.md)."""
    directory = tmp_path / model
    directory.mkdir()
    write_results(directory, 0, [(model, selection, values)
                                 for selection, values in accuracies.items()])
    return directory


def write_results(directory, seed: int, groups):
    """results.csv holding each (model, selection, per-client accuracies) group's test rows."""
    with (directory / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for model, selection, values in groups:
            for client, accuracy in enumerate(values):
                writer.writerow({"seed": seed, "client": client, "model": model, "split": "test",
                                 "selection": selection, "round": 5, "accuracy": accuracy,
                                 "loss": 1.0, "n_samples": 30})


@pytest.fixture
def dirs(tmp_path):
    return [
        results_dir(tmp_path, "local", {"best_val": [0.5, 0.6], "last_round": [0.5, 0.6]}),
        results_dir(tmp_path, "fedavg", {"best_val": [0.6, 0.5], "last_round": [0.6, 0.5]}),
        # persfl: best_val QoI [0.2, 0.1]; last_round QoI [0.1, −0.1].
        results_dir(tmp_path, "persfl", {"best_val": [0.8, 0.7], "last_round": [0.7, 0.5]}),
    ]


def test_evaluate_fairness_writes_the_report_and_answers(tmp_path, dirs):
    result = evaluate_fairness.run(spec(), dirs, tmp_path / "report", tracker=NULL_TRACKER)
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["models"]["persfl"]["performance"]["API"] == pytest.approx(0.15, rel=1e-12)
    # persfl is the only personalized model: nothing to compare, no model named.
    assert result.best == {"test": None} and result.fairest == {"test": None}
    assert data["verdicts"]["best"]["status"] == "nothing to compare"
    assert result.to_markdown() == (tmp_path / "report" / "report.md").read_text()
    assert all(path.is_file() for path in result.files)


def test_evaluate_fairness_uses_the_spec_selection(tmp_path, dirs):
    evaluate_fairness.run(spec(selection="last_round"), dirs, tmp_path / "r")
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["models"]["persfl"]["performance"]["PUD"] == 50.0
    assert data["selection"] == "last_round"


def test_evaluate_fairness_tracks_metrics_by_model_split_and_name(tmp_path, dirs):
    from pflpipe.report.report_writer import build_report
    from pflpipe.report.results_reader import read_table

    report = build_report(read_table(evaluate_fairness.results_tables(dirs)),
                          metrics=("AA", "JI", "PUI"))
    tracked = evaluate_fairness.tracked_metrics(report)
    assert tracked["persfl.test.AA"] == pytest.approx(0.75, rel=1e-12)
    assert tracked["persfl.test.PUI"] == 100.0
    assert tracked["persfl.test.improved.JI"] == pytest.approx(0.3**2 / (2 * 0.05), rel=1e-12)
    assert tracked["local.test.accuracy.JI"] < 1 and "local.test.PUI" not in tracked
    assert not any(name.endswith(".AV") for name in tracked)


def test_evaluate_fairness_names_a_directory_without_results(tmp_path, dirs):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no results.csv in results directory .*empty"):
        evaluate_fairness.run(spec(), [*dirs, empty], tmp_path / "r")


def test_evaluate_fairness_uses_the_spec_baseline_names(tmp_path, dirs):
    with pytest.raises(DataError, match="baseline model 'persfl' has no rows"):
        evaluate_fairness.run(spec(baselines={"global": "persfl"}), dirs[:2], tmp_path / "r")


def test_the_rounds_row_names_only_the_models_that_ran():
    # Issue 27: a FedAvg-only spec's report said "local 20 epochs"; no local model ran.
    base = spec().model_dump(by_alias=True)
    alone = Spec.model_validate({**base, "personalization": []})
    with_local = Spec.model_validate({**base, "personalization": [{"name": "ditto"}]})

    assert evaluate_fairness.rounds_line(alone) == "fedavg 20 rounds"
    assert evaluate_fairness.rounds_line(with_local) == ("fedavg 20 rounds, local 20 epochs, "
                                                     "ditto 20 + 20 warm-start rounds")


def test_the_protocol_says_how_the_global_model_round_is_chosen():
    # Issue 27: FedAvg's best_val is one round for all clients, chosen on their mean validation
    # accuracy; the text said each client's round was chosen on its own validation split.
    from pflpipe.report.report_writer import protocol

    text = protocol("best_val", "local", "fedavg")

    assert "one round for every client" in text
    assert "mean validation accuracy over the clients, weighted by their samples" in text
    assert "A personalized model's round (or epoch) is chosen for each client" in text


TUNED = {"experiment": {"name": "t", "seeds": [1, 2]}, "dataset": {"name": "digits"},
         "partition": {"strategy": "ds1", "n_clients": 2},
         "personalization": [{"name": "fedavg_ft"}, {"name": "ditto", "rounds": 7}],
         "tuning": {"seeds": [100, 101], "entries": [
             {"entry": "fedavg_ft", "grid": {"epochs": [5, 10]}},
             {"entry": "ditto", "grid": {"lam": [0.1, 1.0]}}]}}


def tuning_record(label: str, grid: dict, chosen: dict) -> dict:
    """tuning.json as `tune.keep_record` keeps it beside a tuned entry's results."""
    points = [{"values": {k: v}, "scores": {"100": 0.5, "101": 0.6}, "mean": 0.55}
              for k, values in grid.items() for v in values]
    return {"seeds": [100, 101], "selection": "best_val", "score": "accuracy", "records": [],
            "entries": {label: {"grid": grid, "budget": {"max_points": 8, "rounds": None},
                                "points": points, "chosen": chosen}}}


def collected_seed(tmp_path, seed: int, models: dict[str, list[float]], records: dict):
    """A `collect_results` directory of one seed: results.csv, collected.json, tuning.json."""
    directory = tmp_path / f"seed-{seed}"
    directory.mkdir()
    write_results(directory, seed,
                  [(model, "best_val", values) for model, values in models.items()])
    (directory / "collected.json").write_text(json.dumps({"seed": seed, "models": list(models)}))
    for label, record in records.items():
        (directory / label).mkdir()
        (directory / label / "tuning.json").write_text(json.dumps(record))
    return directory


def test_the_run_table_shows_the_tuned_setting_and_both_kinds_of_seed(tmp_path):
    # The report's Rounds line showed FedAvg-FT's spec default (5 epochs) where the reported
    # seeds ran the 10 that tuning chose, and "seeds" listed experiment.seeds whatever the
    # tables held, without the tuning seeds.
    records = {"fedavg_ft": tuning_record("fedavg_ft", {"epochs": [5, 10]}, {"epochs": 10}),
               "ditto": tuning_record("ditto", {"lam": [0.1, 1.0]}, {"lam": 1.0})}
    seed = collected_seed(tmp_path, 1, {"fedavg": [0.6, 0.5], "local": [0.5, 0.6],
                                        "fedavg_ft": [0.7, 0.7], "ditto": [0.8, 0.6]}, records)
    evaluate_fairness.run(Spec.model_validate(TUNED), [seed], tmp_path / "report")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    run = report["run"]
    assert run["rounds"] == ("fedavg 20 rounds, local 20 epochs, fedavg_ft 10 epochs (tuned on "
                             "tuning seed(s) 100, 101) + 20 warm-start rounds, ditto 7 + 20 "
                             "warm-start rounds")
    # only seed 1's results were evaluated: seed 2 of experiment.seeds is not reported
    assert run["reported seeds"].startswith("1 (")
    assert run["tuning seeds"].startswith("100, 101 (") and "never reported" in run["tuning seeds"]
    assert "seeds" not in run
    assert report["tuning"]["seeds"] == [100, 101] and report["tuning"]["reported_seeds"] == [1]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "fedavg_ft 10 epochs (tuned on tuning seed(s) 100, 101)" in markdown
    assert "(the reported seeds are 1)" in markdown and "### ditto: lam = 1" in markdown


def test_a_tuned_rounds_field_without_its_record_is_not_shown_as_the_spec_default(tmp_path):
    dirs = [results_dir(tmp_path, m, {"best_val": [0.5, 0.6]})
            for m in ("local", "fedavg", "fedavg_ft", "ditto")]   # no tuning.json among them
    evaluate_fairness.run(Spec.model_validate(TUNED), dirs, tmp_path / "report")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run"]["rounds"] == (
        "fedavg 20 rounds, local 20 epochs, fedavg_ft: epochs tuned, the choice is not in these "
        "results + 20 warm-start rounds, ditto 7 + 20 warm-start rounds")
    assert report["run"]["tuning seeds"] == "100, 101 (the spec's; these results hold no " \
        "tuning record)"
    assert "tuning" not in report  # no record: no grid or choice to show


def test_the_report_links_only_files_of_its_own_folder(tmp_path):
    """Copied away from its run, the report's every link still opens (the tables included)."""
    import shutil

    from report_links import broken, links

    seeds = [collected_seed(tmp_path, seed, {"fedavg": [0.6, 0.5], "local": [0.5, 0.6],
                                             "ditto": [0.8, 0.6]}, {}) for seed in (0, 1)]
    evaluate_fairness.run(spec(), seeds, tmp_path / "report")
    copied = Path(shutil.copytree(tmp_path / "report", tmp_path / "elsewhere" / "report"))
    shutil.rmtree(tmp_path / "report")

    assert {"tables/seed-0/results.csv", "tables/seed-1/results.csv"} <= set(links(copied))
    assert broken(copied) == []
    # the tables the text names are the copies beside it, never the runner's folders
    markdown = (copied / "report.md").read_text()
    assert "Tables: tables/seed-0/results.csv, tables/seed-1/results.csv." in markdown
    assert str(tmp_path) not in markdown + (copied / "report.html").read_text()
    assert json.loads((copied / "report.json").read_text())["sources"] == [
        "tables/seed-0/results.csv", "tables/seed-1/results.csv"]
    with (copied / "tables" / "seed-1" / "results.csv").open() as handle:
        assert {row["seed"] for row in csv.DictReader(handle)} == {"1"}
