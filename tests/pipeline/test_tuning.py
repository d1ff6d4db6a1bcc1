"""Leak-proof tuning: the `tuning` section, its stages on kfp.local, and the choice they make.

The pipeline of a tiny spec (digits, 4 clients, 2 rounds; fedprox's lr tuned over 3 values on
one tuning seed, fedper untuned) runs on kfp.local. Independently, each grid point is trained
directly with the stage functions on the tuning seed and scored by hand on its validation rows;
the pipeline must choose the point best there, and its reported seed must equal a plain run of
the spec with that setting, number for number.
"""

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from pflpipe import events, layout
from pflpipe.cli import main
from pflpipe.errors import DataError, DivergenceError, SpecError
from pflpipe.pipelines.local_runner import run_local
from pflpipe.spec import parse_spec
from pflpipe.spec.tuning import point_spec, read_tuning, replace_entry, with_values
from pflpipe.stages import partition_data, personalize, tune, tune_point, warm_start_fedavg

SPEC = """\
experiment: {{name: tuned, seeds: [0], output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
personalization:
  - {{name: fedprox, label: prox, rounds: 2}}
  - {{name: fedper, rounds: 1}}
  - {{name: local, epochs: 1}}
tracking: {{enabled: false}}
tuning:
  seeds: [7]
  budget: {{max_points: 3, rounds: 1}}
  entries:
    - entry: prox
      grid: {{lr: [0.001, 0.3, 0.02]}}
"""
GRID = [{"lr": 0.001}, {"lr": 0.3}, {"lr": 0.02}]  # not the untuned lr (0.05)


def rows(path: Path) -> list[dict]:
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))


def mean_val_accuracy(table: list[dict]) -> float:
    """By hand: each client's best_val personalized model's validation accuracy, averaged."""
    values = [float(r["accuracy"]) for r in table if r["split"] == "val"
              and r["selection"] == "best_val" and r["scope"] == ""]
    assert len(values) == 4  # one per client
    return math.fsum(values) / len(values)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The pipeline's run, and every grid point plus the plain run computed directly."""
    tmp = tmp_path_factory.mktemp("tuning")
    spec = parse_spec(SPEC.format(out=tmp / "pipeline"))
    run = run_local(spec, {}, results_dir=tmp / "pipeline")
    direct = parse_spec(SPEC.format(out=tmp / "direct"))  # its own checkpoints: nothing reused

    def warm(seed: int) -> tuple[Path, Path]:
        part, ckpt = tmp / f"partition-{seed}", tmp / f"checkpoints-{seed}"
        partition_data.run(direct, seed, part, reuse_split=False)
        warm_start_fedavg.run(direct, seed, part, ckpt, tmp / f"fedavg-{seed}")
        return part, ckpt

    part, ckpt = warm(7)
    scores = []
    for index, values in enumerate(GRID):
        out = tmp / f"point-{index}"
        personalize.run(point_spec(direct, "prox", values), 7, "prox", part, ckpt, out)
        scores.append(mean_val_accuracy(rows(out / "results.csv")))
    best = GRID[scores.index(max(scores))]
    plain_spec = replace_entry(direct, "prox", with_values(direct.algorithm("prox"), best))
    part0, ckpt0 = warm(0)
    personalize.run(plain_spec, 0, "prox", part0, ckpt0, tmp / "plain")
    return {"spec": spec, "run": run, "scores": scores, "best": best,
            "plain": rows(tmp / "plain" / "results.csv"), "tmp": tmp}


def test_tune_chooses_the_point_best_on_the_tuning_seeds_validation_split(tuned):
    record = json.loads((tuned["run"].seeds[0] / "prox" / "tuning.json").read_text())
    entry = record["entries"]["prox"]
    assert entry["chosen"] == tuned["best"]
    assert [p["values"] for p in entry["points"]] == GRID
    assert [p["scores"]["7"] for p in entry["points"]] == tuned["scores"]
    assert record["seeds"] == [7] and len(set(tuned["scores"])) > 1  # the grid discriminates


def test_reported_seed_equals_a_plain_run_with_the_chosen_setting(tuned):
    reported = rows(tuned["run"].seeds[0] / "prox" / "results.csv")
    assert reported == tuned["plain"]


def test_reported_seeds_never_train_the_other_grid_points_and_untuned_entries_keep_the_spec(
        tuned):
    seed_dir = tuned["run"].seeds[0]
    assert not (seed_dir / "fedper" / "tuning.json").exists()
    assert {r["model"] for r in rows(seed_dir / "results.csv")} == {"fedavg", "local", "prox",
                                                                    "fedper"}
    # the tuning seed is no reported seed
    assert set(tuned["run"].seeds) == {0}


def test_a_new_grid_point_reruns_only_its_own_task_and_the_tuned_entry(tuned):
    """Every tuning stage is cached: a second run with a fourth grid point trains only that."""
    text = SPEC.format(out=tuned["tmp"] / "pipeline").replace(
        "max_points: 3", "max_points: 4").replace("[0.001, 0.3, 0.02]", "[0.001, 0.3, 0.02, 0.1]")
    again = run_local(parse_spec(text), {}, results_dir=tuned["tmp"] / "pipeline")
    ran = sorted(t.title for t in again.tasks if t.status != "CACHED")
    assert ran == ["collect_results · seed 0", "evaluate_fairness", "personalize[prox] · seed 0",
                   "tune", "tune · seed 7", "tune_point[prox, lr=0.1] · seed 7"]
    points = read_tuning(again.seeds[0] / "prox")["entries"]["prox"]["points"]
    assert [p["scores"]["7"] for p in points[:3]] == tuned["scores"]  # the cached points'


def test_mlflow_records_the_chosen_setting_as_the_tuned_runs_params(tuned):
    from pflpipe.tracking.results_logging import _settings

    seed_dir = tuned["run"].seeds[0]
    assert _settings(tuned["spec"], "prox", seed_dir / "prox")["lr"] == tuned["best"]["lr"]
    assert "lr" not in _settings(tuned["spec"], "fedper", seed_dir / "fedper")  # untuned: None


def test_report_lists_every_grid_the_chosen_values_and_the_tuning_seeds(tuned):
    report = json.loads((tuned["run"].report / "report.json").read_text())
    tuning = report["tuning"]
    assert tuning["seeds"] == [7] and tuning["reported_seeds"] == [0]
    assert tuning["entries"]["prox"]["grid"] == {"lr": [0.001, 0.3, 0.02]}
    assert tuning["entries"]["prox"]["chosen"] == tuned["best"]
    assert tuning["untuned"] == ["fedper"]
    markdown = (tuned["run"].report / "report.md").read_text()
    assert "## Tuning" in markdown and "tuning seed(s) 7" in markdown
    assert f"### prox: lr = {tuned['best']['lr']:g}" in markdown
    assert "Not tuned (run with the spec's settings): fedper." in markdown
    assert "Unequal tuning: the entries tried different numbers of settings (prox 3, fedper 1)" \
        in markdown


def test_tune_point_scores_a_point_as_the_hand_computation(tuned, tmp_path):
    spec = parse_spec(SPEC.format(out=tuned["tmp"] / "direct"))
    out = tmp_path / "point"
    result = tune_point.run(point_spec(spec, "prox", GRID[1]), 7, "prox", GRID[1],
                            tuned["tmp"] / "partition-7", tuned["tmp"] / "checkpoints-7", out)
    assert result.score == tuned["scores"][1]
    assert json.loads((out / layout.POINT_JSON).read_text()) == {
        "entry": "prox", "seed": 7, "values": GRID[1], "score": tuned["scores"][1]}


def write_points(root: Path, scores: dict[int, list[float]]) -> list[Path]:
    """One tune_point directory per (seed, grid point), holding only its score."""
    dirs = []
    for seed, per_point in scores.items():
        for index, score in enumerate(per_point):
            directory = root / f"{seed}-{index}"
            directory.mkdir(parents=True)
            (directory / layout.POINT_JSON).write_text(json.dumps(
                {"entry": "prox", "seed": seed, "values": GRID[index], "score": score}))
            dirs.append(directory)
    return dirs


def test_tune_chooses_the_best_mean_over_seeds_a_tie_going_to_the_first_point(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    # means over the two seeds: 0.5, 0.7, 0.7 -> the second point (the first of the tie)
    dirs = write_points(tmp_path / "points", {7: [0.5, 0.6, 0.9], 8: [0.5, 0.8, 0.5]})
    per_seed = [tmp_path / "seed-7", tmp_path / "seed-8"]
    tune.run(spec, dirs[:3], per_seed[0])
    tune.run(spec, dirs[3:], per_seed[1])
    result = tune.run(spec, per_seed, tmp_path / "chosen")   # the second fan-in level
    assert result.seeds == (7, 8) and result.chosen == {"prox": GRID[1]}
    points = read_tuning(tmp_path / "chosen")["entries"]["prox"]["points"]
    assert [p["mean"] for p in points] == [0.5, 0.7, 0.7]
    assert points[0]["scores"] == {"7": 0.5, "8": 0.5}


def test_a_regression_is_tuned_on_the_lowest_validation_mse_never_on_test(tmp_path):
    spec = parse_spec(
        "experiment: {name: t}\ndataset: {name: gaussian, n_min: 5, n_max: 9}\n"
        "partition: {strategy: natural, n_clients: 2, min_samples: 5}\n"
        "personalization: [{name: fedprox, label: prox}]\n"
        "tuning: {seeds: [7], entries: [{entry: prox, grid: {lr: [0.001, 0.3, 0.02]}}]}\n")
    # val MSE of the two clients (best_val, personalized rows only) per point; test rows and a
    # global model's rows would favour another point, and must not count
    val = [(0.5, 0.7), (0.2, 0.4), (0.3, 0.1)]
    dirs = []
    for index, losses in enumerate(val):
        table = [{"split": "val", "selection": "best_val", "scope": "", "loss": loss}
                 for loss in losses]
        table += [{"split": "test", "selection": "best_val", "scope": "", "loss": 0.0},
                  {"split": "val", "selection": "best_val", "scope": "global", "loss": 0.0},
                  {"split": "val", "selection": "last_round", "scope": "", "loss": 0.0}]
        score = tune.validation_score(spec, table)
        assert score == pytest.approx(sum(losses) / 2)
        directory = tmp_path / str(index)
        directory.mkdir()
        (directory / layout.POINT_JSON).write_text(json.dumps(
            {"entry": "prox", "seed": 7, "values": GRID[index], "score": score}))
        dirs.append(directory)
    result = tune.run(spec, dirs, tmp_path / "chosen")
    assert result.chosen == {"prox": GRID[2]}   # means 0.6, 0.3, 0.2: the lowest MSE
    assert read_tuning(tmp_path / "chosen")["score"] == "mse"


def test_tune_refuses_a_point_missing_a_seed(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    dirs = write_points(tmp_path / "points", {7: [0.5, 0.6, 0.9], 8: [0.5, 0.8]})
    with pytest.raises(DataError, match=r'grid point \{"lr": 0.02\} of .prox. has no score for '
                       r"tuning seed\(s\) \[8\]"):
        tune.run(spec, dirs, tmp_path / "chosen")


def test_a_diverged_point_is_scored_as_failed_and_the_rest_chosen(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    dirs = write_points(tmp_path / "points", {7: [0.5, 0.6, 0.9], 8: [0.5, 0.8, 0.5]})
    failed = json.loads((dirs[5] / layout.POINT_JSON).read_text())   # point 3 on seed 8
    (dirs[5] / layout.POINT_JSON).write_text(json.dumps(
        {**failed, "score": None, "diverged": "client 1, round 2: loss became NaN"}))

    result = tune.run(spec, dirs, tmp_path / "chosen")

    # means 0.5, 0.7 and (diverged) none: the second point, never the diverged third
    assert result.chosen == {"prox": GRID[1]} and result.diverged == {"prox": 1}
    points = read_tuning(tmp_path / "chosen")["entries"]["prox"]["points"]
    assert [p["mean"] for p in points] == [0.5, 0.7, None]
    assert points[2]["diverged"] == "seed 8: client 1, round 2: loss became NaN"
    assert "(1 diverged point(s) not chosen)" in result.to_markdown()


def test_every_point_diverged_stops_naming_the_grid(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    dirs = write_points(tmp_path / "points", {7: [None, None, None]})
    for directory in dirs:
        record = json.loads((directory / layout.POINT_JSON).read_text())
        (directory / layout.POINT_JSON).write_text(json.dumps({**record, "diverged": "NaN"}))

    with pytest.raises(DivergenceError, match=r"tuning.entries\[0\] \('prox'\): every grid "
                       r"point diverged on the tuning seeds \(seed 7: NaN; seed 7: NaN; seed 7: "
                       r"NaN\); change the values of tuning.entries\[0\].grid"):
        tune.run(spec, dirs, tmp_path / "chosen")


DIVERGING = """\
experiment: {{name: d, seeds: [0], output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds2, n_clients: 6, alpha: 0.5}}
federation: {{rounds: 3, lr: 0.3}}
personalization: [{{name: ditto}}]
tracking: {{enabled: false}}
tuning: {{seeds: [7], entries: [{{entry: ditto, grid: {{lr: [0.05, 90]}}}}]}}
"""


@pytest.fixture(scope="module")
def diverging(tmp_path_factory):
    """The DIVERGING spec's tuning seed: its partition and warm start."""
    tmp = tmp_path_factory.mktemp("diverging")
    spec = parse_spec(DIVERGING.format(out=tmp))
    partition_data.run(spec, 7, tmp / "p", reuse_split=False)
    warm_start_fedavg.run(spec, 7, tmp / "p", tmp / "c", tmp / "fedavg")
    return spec, tmp / "p", tmp / "c"


def test_tune_point_that_diverges_writes_a_failed_score_and_warns(diverging, tmp_path, capsys):
    spec, part, ckpt = diverging
    out, values = tmp_path / "point", {"lr": 90}
    capsys.readouterr()

    with events.addressed_to("runner"):
        result = tune_point.run(point_spec(spec, "ditto", values), 7, "ditto", values, part,
                                ckpt, out)

    seen = [e for line in capsys.readouterr().out.splitlines() if (e := events.parse(line))]
    assert result.score is None
    assert result.diverged.startswith("entry 'ditto', client 5, round 1: loss became NaN or "
                                      "infinite")
    record = json.loads((out / layout.POINT_JSON).read_text())
    assert record["score"] is None and record["diverged"] == result.diverged
    assert "federation.lr" not in record["diverged"]   # that hint is not for a grid point
    [warned] = [e["text"] for e in seen if e["event"] == "warning"]
    assert warned.startswith('grid point {"lr": 90} of \'ditto\' diverged on tuning seed 7 (')


def test_grid_points_as_members_leave_a_diverging_unit_to_the_seeds_loop(diverging, tmp_path):
    spec, part, ckpt = diverging   # lam varies per member; an lr of 90 diverges
    points = [(point_spec(spec, "ditto", {**v, "lr": 90}), "ditto", v)
              for v in ({"lam": 0.1}, {"lam": 1.0})]

    # train_members turns a DataError into "trains per seed": each point then scores alone
    with pytest.raises(DataError, match=r"a grid point diverged \(entry 'ditto', client 5 "
                       r"\(seed 7, member 0\), round 1: .*\); each point trains alone"):
        tune_point.run_members(points, [7], [part], [ckpt],
                               [[tmp_path / "a"], [tmp_path / "b"]])


def test_report_marks_a_diverged_point():
    from pflpipe.report.tuning_section import blocks

    record = {"grid": {"lr": [0.1, 90]}, "budget": {"max_points": 8, "rounds": None},
              "chosen": {"lr": 0.1},
              "points": [{"values": {"lr": 0.1}, "scores": {"7": 0.8}, "mean": 0.8},
                         {"values": {"lr": 90}, "scores": {"7": None}, "mean": None,
                          "diverged": "seed 7: client 1, round 1: loss became NaN"}]}

    out = blocks({"score": "accuracy", "seeds": [7], "reported_seeds": [0], "untuned": [],
                  "selection": "best_val", "entries": {"prox": record}})

    assert ("p", '2 grid point(s), budget 8. 1 diverged, scored as failed and never chosen: '
                 '{"lr": 90} (seed 7: client 1, round 1: loss became NaN).') in out
    assert out[-1] == ("table", ["lr", "seed 7", "mean", "chosen"],
                       [["0.1", "0.8000", "0.8000", "✓"], ["90", "diverged", "diverged", ""]])


OVERLAP = SPEC.replace("seeds: [7]", "seeds: [7, 0]")


def test_tuning_seeds_overlapping_experiment_seeds_exit_2_naming_both(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(OVERLAP.format(out=tmp_path))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tuning.seeds" in err and "experiment.seeds [0]" in err
    assert "tuning.seeds [7, 0]" in err and "seed(s) [0] are in both" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"entry": "fedprox"}, "tuning.entries[0].entry", "choose among prox, fedper"),
    ({"grid": {"lrr": [0.1]}}, "tuning.entries[0].grid.lrr", "did you mean 'lr'"),
    ({"grid": {"lr": [0.1, -1.0]}}, "tuning.entries[0].grid.lr[1]", "greater than 0"),
    ({"grid": {"lr": [0.1, 0.2], "mu": [0.0, 0.1]}}, "tuning.entries[0].grid",
     "4 grid points, more than the budget's max_points 3"),
    ({"grid": {"rounds": [1, 2]}}, "tuning.entries[0].grid.rounds", "the budget sets rounds"),
    ({"grid": {"lr": [0.1, 0.1]}}, "tuning.entries[0].grid", "must not repeat a value"),
    # a grid value is checked as the entry's own field is, against the rest of the spec too
    ({"grid": {"lr": [0.01, 1e6]}}, "tuning.entries[0].grid.lr[1]",
     "must be less than or equal to 100"),
    ({"grid": {"warm_start": [1, 50]}}, "tuning.entries[0].grid.warm_start[1]",
     "round 50 of the FedAvg warm start does not exist: it runs federation.rounds = 2 rounds"),
    ({"grid": {"mu": [float("nan"), 1.0]}}, "tuning.entries[0].grid.mu[0]",
     "must be a finite number (got nan)"),
])
def test_bad_tuning_entries_name_their_field(change, field, message, tmp_path):
    data = yaml.safe_load(SPEC.format(out=tmp_path))
    data["tuning"]["entries"][0] |= change
    with pytest.raises(SpecError) as caught:
        parse_spec(yaml.safe_dump(data))
    text = str(caught.value)
    assert field in text and message in text, text


def test_validate_shows_the_tuning_plan(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(out=tmp_path))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tune                tuning seeds [7] (never reported)" in out
    assert "prox: 3 grid point(s) of at most 3, 1 rounds each: lr [0.001, 0.3, 0.02]" in out
    assert "not tuned (the spec's settings): fedper" in out
    assert "warning: Unequal tuning" in out
    equal = SPEC.format(out=tmp_path) + "    - entry: fedper\n      grid: {lr: [0.01, 0.1, 0.2]}\n"
    path.write_text(equal)
    assert main(["validate", str(path)]) == 0
    assert "Unequal" not in capsys.readouterr().out


def ir_tasks(ir: dict) -> dict[str, tuple[str, dict]]:
    """Every task of a compiled pipeline as name → (the loops it is nested in, its spec)."""
    components = ir["components"]
    found: dict[str, tuple[str, dict]] = {}

    def walk(dag: dict, where: str) -> None:
        for name, task in dag["tasks"].items():
            ref = task["componentRef"]["name"]
            if "dag" in components[ref]:
                walk(components[ref]["dag"], f"{where}/{task['taskInfo']['name']}")
            else:
                found[f"{where}/{name}"] = (where, task)

    walk(ir["root"]["dag"], "")
    return found


def test_a_tuning_section_compiles_to_grid_points_nested_in_tuning_seeds(tmp_path):
    from pflpipe.pipelines.compiler import compile_pipeline

    spec = parse_spec(SPEC.format(out=tmp_path))
    path = compile_pipeline(spec, tmp_path / "tuned.yaml")
    ir = next(yaml.safe_load_all(path.read_text()))
    tasks = ir_tasks(ir)
    grid = "/for each tuning seed/for each grid point"
    assert {name for name, (where, _) in tasks.items() if where.startswith("/for each tuning")} \
        == {"/for each tuning seed/partition-data", "/for each tuning seed/warm-start-fedavg",
            f"{grid}/tune-point", "/for each tuning seed/tune"}
    assert "/tune-2" in tasks  # the choice over every tuning seed
    point_loop = next(c["dag"] for c in ir["components"].values() if "dag" in c
                      and "tune-point" in c["dag"]["tasks"])
    iterator = next(t["parameterIterator"] for c in ir["components"].values() if "dag" in c
                    for t in c["dag"]["tasks"].values()
                    if t.get("taskInfo", {}).get("name") == "for each grid point")
    points = json.loads(iterator["items"]["raw"])
    assert [json.loads(p["values"]) for p in points] == GRID
    for point, values in zip(points, GRID, strict=True):
        scoped = json.loads(point["spec_json"])
        (entry,) = scoped["personalization"]
        assert entry["lr"] == values["lr"] and entry["rounds"] == 1   # the budget's rounds
        assert "tuning" not in scoped  # a grid point does not see the other points
    assert point_loop["tasks"]["tune-point"]["cachingOptions"] == {"enableCache": True}
    seed_loop = "/for each seed"
    tuned = tasks[f"{seed_loop}/for each tuned algorithm/personalize-2"][1]
    untuned = tasks[f"{seed_loop}/for each algorithm/personalize"][1]
    assert tuned["inputs"]["artifacts"]["tuning"] == {
        "componentInputArtifact": "pipelinechannel--tune-2-chosen"}  # the choice over all seeds
    assert "tuning" not in untuned["inputs"]["artifacts"]
    collect = tasks[f"{seed_loop}/collect-results"][1]["inputs"]["artifacts"]
    assert {"personalized", "tuned"} <= set(collect)


def test_a_spec_without_tuning_dumps_as_before_the_section_existed(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path).split("tuning:")[0])
    assert "tuning" not in json.loads(spec.model_dump_json(by_alias=True))
    assert "tuning" not in spec.model_dump()
