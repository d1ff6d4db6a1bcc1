"""The README's quickstart, for real: `pflpipe run specs/persfl-digits.yaml` as a user runs it.

One process per run of the CLI, the pipeline on kfp.local's SubprocessRunner (one subprocess per
task), tracking into a real `mlflow server` on 127.0.0.1 (sqlite backend) through
$MLFLOW_TRACKING_URI. The quickstart spec is taken unchanged from specs/: digits, DS-1, 10 clients,
the FedAvg warm start, PersFL, FedPer, the local baseline and the fairness evaluation.

A second run adds an algorithm to the same spec: the partition and the warm start come from the
cache, the new algorithm runs and joins the report.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "specs" / "persfl-digits.yaml"
N_CLIENTS = 10
MODELS = {"fedavg", "local", "persfl", "fedper"}


def pflpipe(*args: str, cwd: Path, tracking_uri: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "COLUMNS": "200"}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, mlflow_server):
    """Run the quickstart, then the same spec with one more algorithm (fedavg_ft)."""
    work = tmp_path_factory.mktemp("quickstart")
    (work / "specs").mkdir()
    shutil.copy(QUICKSTART, work / "specs" / QUICKSTART.name)
    first = pflpipe("run", f"specs/{QUICKSTART.name}", cwd=work, tracking_uri=mlflow_server)
    assert first.returncode == 0, first.stdout + first.stderr

    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["personalization"].append({"name": "fedavg_ft", "epochs": 2})
    (work / "specs" / "more.yaml").write_text(yaml.safe_dump(spec))
    second = pflpipe("run", "specs/more.yaml", cwd=work, tracking_uri=mlflow_server)
    assert second.returncode == 0, second.stdout + second.stderr
    return work / "results" / spec["experiment"]["name"], first, second, spec


def results_rows(results: Path) -> list[dict]:
    with (results / "seed-0" / "results.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_run_says_where_the_report_models_and_mlflow_run_are(quickstart):
    results, first, _, _ = quickstart
    out = first.stdout
    assert "Traceback" not in out + first.stderr
    for stage in ("partition_data", "warm_start_fedavg", "train_local", "select_teachers",
                  "distill_grid_search", "personalize[fedper]", "evaluate_fairness"):
        assert f"✓ {stage}" in out, stage
    assert "report.html" in out and "MLflow   run " in out
    assert "Best performing on test:" in out


def test_every_client_of_every_model_is_scored_in_range(quickstart):
    results, *_ = quickstart
    rows = [row for row in results_rows(results) if row["split"] == "test"
            and row["selection"] == "best_val"]
    by_model = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[int(row["client"])] = float(row["accuracy"])
    assert set(by_model) == MODELS | {"fedavg_ft"}
    for model, accuracy in by_model.items():
        assert sorted(accuracy) == list(range(N_CLIENTS)), model
        assert all(0.0 <= a <= 1.0 for a in accuracy.values()), model
        # 4 classes per client: chance is 0.25 on a client's own labels.
        assert sum(accuracy.values()) / N_CLIENTS > 0.7, model
    mean = {m: sum(a.values()) / N_CLIENTS for m, a in by_model.items()}
    assert mean["persfl"] > mean["fedavg"]
    for model in MODELS:
        models = sorted((results / "seed-0" / model / "models").glob("client_*.pt"))
        if model != "fedavg":  # FedAvg's model is the one global model
            assert len(models) == N_CLIENTS, model


def test_report_covers_every_model_and_client(quickstart):
    results, *_ = quickstart
    report = json.loads((results / "report" / "report.json").read_text())
    html = (results / "report" / "report.html").read_text()
    figures = list((results / "report" / "figures").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
    for model in MODELS | {"fedavg_ft"}:
        assert model in html
    text = json.dumps(report)
    assert all(f"Client {c}" in (results / "report" / "report.md").read_text()
               for c in range(N_CLIENTS))
    assert "persfl" in text and "fedavg_ft" in text


def test_second_run_reuses_the_cached_partition_and_warm_start(quickstart):
    _, first, second, _ = quickstart
    assert "↺ partition_data" in second.stdout and "↺ warm_start_fedavg" in second.stdout
    assert "✓ personalize[fedavg_ft]" in second.stdout
    # not cached (it tracks into the new run), but its finished checkpoints are: nothing trains
    local = next(line for line in second.stdout.splitlines() if "train_local" in line)
    assert "↺ train_local" in local and "reused finished checkpoints" in local
    assert "↺" not in first.stdout or "warm_start_fedavg" not in first.stdout.split("↺", 1)[1]


@pytest.fixture(scope="module")
def server_runs(quickstart, mlflow_server):
    _, _, _, spec = quickstart
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(spec["experiment"]["name"])
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    parents = sorted((r for r in runs if "mlflow.parentRunId" not in r.data.tags),
                     key=lambda r: r.info.start_time)
    assert len(parents) == 2
    first = parents[0].info.run_id
    mine = [r for r in runs if r.data.tags.get("root_run_id") == first]
    return client, parents[0], mine


def test_server_holds_the_parent_run_with_tags_fairness_and_report(server_runs):
    client, parent, _ = server_runs
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert len(tags["spec_hash"]) == 16 and len(tags["partition_hash.seed-0"]) == 64
    assert tags["seeds"] == "0" and tags["best.test"] in MODELS
    assert "git_commit" in tags
    # fairness over every client's accuracy always exists; over the improved clients (U⁺) only
    # when some client improved on max(G, L), which the quickstart does not promise
    assert {"persfl.test.accuracy.JI", "fedper.test.PUI",
            "fedavg.test.AA"} <= set(parent.data.metrics)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "spec_resolved.yaml", "report"} <= artifacts
    report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/report.html" in report


def test_server_holds_a_child_run_per_algorithm_and_per_client(server_runs):
    client, parent, runs = server_runs
    stages = [r for r in runs if r.data.tags["mlflow.parentRunId"] == parent.info.run_id]
    assert {r.data.tags["stage"] for r in stages} == {
        "warm_start_fedavg", "train_local", "select_teachers", "distill_grid_search",
        "personalize"}
    per_client = [r for r in runs if "client_id" in r.data.tags]
    clients = {}
    for run in per_client:
        clients.setdefault(run.data.tags["algorithm"], set()).add(int(run.data.tags["client_id"]))
    assert clients == {m: set(range(N_CLIENTS)) for m in MODELS}
    assert all(r.info.status == "FINISHED" for r in runs)


@pytest.mark.parametrize("algorithm", ["fedavg", "local", "fedper"])
def test_client_runs_have_per_round_metric_histories(server_runs, algorithm):
    client, _, runs = server_runs
    (run,) = [r for r in runs if r.data.tags.get("algorithm") == algorithm
              and r.data.tags.get("client_id") == "3"]
    history = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert len(history) > 5 and len({m.step for m in history}) == len(history)
    assert all(0 <= m.value <= 1 for m in history)
    assert 0 <= run.data.metrics["best_val.test_accuracy"] <= 1


def test_persfl_client_runs_carry_the_teacher_round_and_chosen_lambda_t(server_runs):
    client, _, runs = server_runs
    teachers = [r for r in runs if r.data.tags.get("stage") == "select_teachers"
                and "client_id" in r.data.tags]
    assert len(teachers) == N_CLIENTS
    assert all(0 <= r.data.metrics["teacher_round"] <= 30 for r in teachers)
    distilled = [r for r in runs if r.data.tags.get("stage") == "distill_grid_search"
                 and "client_id" in r.data.tags]
    assert len(distilled) == N_CLIENTS
    for run in distilled:
        assert 0 <= float(run.data.params["lam"]) <= 1
        assert float(run.data.params["temperature"]) > 0


def test_readme_quickstart_command_runs_this_spec():
    """The README's first command is the run these tests make (after installing the project)."""
    readme = (REPO / "README.md").read_text()
    command = readme.split("<!-- quickstart-command -->")[1].split("```")[1].strip()
    assert command.endswith(f"pflpipe run specs/{QUICKSTART.name}")
    assert " install . " in command  # non-editable: what a user gets
