"""Every component: its `python_func` on tiny real artifacts (digits, 4 clients, a few rounds),
chained as the pipeline chains them, and every component compiled on its own.

The chain tracks into an MLflow sqlite file of the test; the parent run is opened as the CLI does.
"""

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml
from client_tables import client_history
from kfp import compiler, dsl

from pflpipe.components._image import PFLPIPE_IMAGE
from pflpipe.components.collect_results import collect_results
from pflpipe.components.distill_grid_search import distill_grid_search
from pflpipe.components.evaluate_fairness import evaluate_fairness
from pflpipe.components.partition_data import partition_data
from pflpipe.components.personalize import personalize
from pflpipe.components.select_teachers import select_teachers
from pflpipe.components.train_local import train_local
from pflpipe.components.tune import tune
from pflpipe.components.tune_point import tune_point
from pflpipe.components.warm_start_fedavg import warm_start_fedavg
from pflpipe.errors import DataError, TrackingError
from pflpipe.pipelines import build_pipeline
from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.spec import Spec, parse_spec
from pflpipe.stages import evaluate_fairness as evaluate_stage
from pflpipe.tracking import open_parent_run
from pflpipe.training import csv_tables

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = [partition_data, warm_start_fedavg, train_local, personalize, select_teachers,
              distill_grid_search, collect_results, evaluate_fairness, tune_point, tune]
N_CLIENTS = 4

TINY = """\
experiment: {{name: tiny, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 3}}
personalization:
  - {{name: persfl}}
  - {{name: fedper, rounds: 2}}
  - {{name: local, epochs: 2}}
distillation: {{epochs: 1, lambdas: [0.0, 0.5], temperatures: [1.0, 5.0]}}
tracking: {{uri: "sqlite:///{out}/mlflow.db"}}
"""


def artifact(kind, tmp: Path, name: str):
    return kind(name=name, uri=str(tmp / name))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Run every component's python_func in pipeline order; return the artifacts by name."""
    tmp = tmp_path_factory.mktemp("chain")
    spec = parse_spec(TINY.format(out=tmp))
    parent = open_parent_run(spec)
    track = parent.pipeline_parameters()
    a = {name: artifact(kind, tmp, name) for name, kind in [
        ("partition", dsl.Dataset), ("checkpoints", dsl.Model), ("fedavg", dsl.Model),
        ("local", dsl.Model), ("fedper", dsl.Model), ("teachers", dsl.Dataset),
        ("persfl", dsl.Model), ("seed0", dsl.Model), ("metrics", dsl.Metrics),
        ("report", dsl.Artifact), ("html", dsl.HTML)]}
    md = {name: artifact(dsl.Markdown, tmp, f"{name}.md") for name in
          ("partition", "warm", "local", "fedper", "teachers", "persfl", "seed0", "report")}
    full = spec.model_dump_json(by_alias=True)

    def scoped(stage, label=None):
        return scoped_spec_json(spec, stage, label)

    partition_data.python_func(spec_json=scoped("partition_data"), seed=0,
                               partition=a["partition"], summary=md["partition"])
    warm_start_fedavg.python_func(spec_json=scoped("warm_start_fedavg"), seed=0,
                                  partition=a["partition"], checkpoints=a["checkpoints"],
                                  results=a["fedavg"], summary=md["warm"])
    train_local.python_func(spec_json=scoped("train_local"), seed=0, partition=a["partition"],
                            results=a["local"], summary=md["local"])
    personalize.python_func(spec_json=scoped("personalize", "fedper"), seed=0, label="fedper",
                            partition=a["partition"], checkpoints=a["checkpoints"],
                            results=a["fedper"], summary=md["fedper"])
    select_teachers.python_func(spec_json=scoped("select_teachers"), seed=0,
                                checkpoints=a["checkpoints"], teachers=a["teachers"],
                                summary=md["teachers"])
    distill_grid_search.python_func(spec_json=scoped("distill_grid_search"), seed=0,
                                    partition=a["partition"], checkpoints=a["checkpoints"],
                                    teachers=a["teachers"], results=a["persfl"],
                                    summary=md["persfl"])
    collect_results.python_func(spec_json=full, seed=0, partition=a["partition"],
                                checkpoints=a["checkpoints"], fedavg=a["fedavg"],
                                local=a["local"], persfl=a["persfl"], personalized=[a["fedper"]],
                                results=a["seed0"], metrics=a["metrics"], summary=md["seed0"])
    evaluate_fairness.python_func(spec_json=full, results=[a["seed0"]], report=a["report"],
                                  html=a["html"], summary=md["report"], kfp_run_id="run-1",
                                  **track)
    parent.finish()
    return {"spec": spec, "parent": parent, "md": md,
            **{name: Path(x.path) for name, x in a.items()}, "metrics_artifact": a["metrics"],
            "report_artifact": a["report"]}


def test_partition_data_writes_a_partition_of_every_client(chain):
    manifest = json.loads((chain["partition"] / "manifest.json").read_text())
    assert manifest["n_clients"] == N_CLIENTS and manifest["seed"] == 0
    assert len(list((chain["partition"] / "clients").glob("client_*.pt"))) == N_CLIENTS
    summary = Path(chain["md"]["partition"].path).read_text()
    assert summary.startswith("**partition_data**: digits, ds1, 4 clients, seed 0")
    assert summary.count("\n| ") == 1 + N_CLIENTS  # the header and a row per client


def test_warm_start_keeps_every_round(chain):
    rounds = sorted(p.name for p in chain["checkpoints"].glob("round_*.pt"))
    assert rounds == [f"round_{r:04d}.pt" for r in range(4)]
    assert (chain["checkpoints"] / "round_metrics.csv").is_file()
    assert (chain["fedavg"] / "results.csv").is_file()


@pytest.mark.parametrize("name", ["local", "fedper", "persfl"])
def test_training_components_write_a_results_directory_with_client_models(chain, name):
    models = sorted(p.name for p in (chain[name] / "models").glob("client_*.pt"))
    assert models == [f"client_{c:04d}.pt" for c in range(N_CLIENTS)]
    assert Path(chain["md"][name].path).read_text().strip()


def test_select_teachers_chooses_a_round_per_client(chain):
    teachers = json.loads((chain["teachers"] / "teachers.json").read_text())["teachers"]
    assert [t["client"] for t in teachers] == list(range(N_CLIENTS))
    assert all(1 <= t["round"] <= 3 for t in teachers)


def test_collect_results_gathers_every_model_of_the_seed(chain):
    collected = json.loads((chain["seed0"] / "collected.json").read_text())
    assert collected == {"seed": 0, "models": ["fedavg", "local", "persfl", "fedper"]}
    rows = csv_tables.read_csv(chain["seed0"] / "results.csv")
    # models × splits × selections × clients; no GA twins: none of these has a global model
    # beside FedAvg's own (FedPer's head is never sent)
    assert len(rows) == 4 * 2 * 2 * N_CLIENTS and not any(r["scope"] for r in rows)
    assert set(chain["metrics_artifact"].metadata) == {
        "fedavg.test_accuracy", "local.test_accuracy", "persfl.test_accuracy",
        "fedper.test_accuracy"}
    assert all(0 <= v <= 1 for v in chain["metrics_artifact"].metadata.values())
    personalized = [float(r["accuracy"]) for r in rows if r["model"] == "fedper"
                    and r["split"] == "test" and r["selection"] == "best_val" and not r["scope"]]
    assert chain["metrics_artifact"].metadata["fedper.test_accuracy"] == pytest.approx(
        sum(personalized) / N_CLIENTS)


def test_collect_results_task_imports_neither_mlflow_nor_torch(chain, tmp_path):
    """One task per seed: it copies and concatenates; evaluate_fairness tracks every seed, so
    the seed's task pays for neither import (docs/performance.md, start-up)."""
    (tmp_path / "spec.json").write_text(chain["spec"].model_dump_json(by_alias=True))
    artifacts = {"partition": "Dataset", "checkpoints": "Model", "fedavg": "Model",
                 "local": "Model", "persfl": "Model"}
    code = f"""
import sys
from pathlib import Path
from kfp import dsl
from pflpipe.components.collect_results import collect_results
a = {{name: getattr(dsl, kind)(name=name, uri=str(Path({str(chain["partition"].parent)!r}) / name))
     for name, kind in {artifacts!r}.items()}}
out = {{name: kind(name=name, uri=str(Path({str(tmp_path)!r}) / name)) for name, kind in
       [("seed0", dsl.Model), ("metrics", dsl.Metrics), ("summary", dsl.Markdown)]}}
collect_results.python_func(
    spec_json=Path({str(tmp_path / "spec.json")!r}).read_text(), seed=0,
    personalized=[dsl.Model(name="fedper", uri=str(Path(a["fedavg"].path).parent / "fedper"))],
    results=out["seed0"], metrics=out["metrics"], summary=out["summary"], **a)
print(sorted(m for m in ("mlflow", "torch") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)

    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "seed0" / "results.csv").read_bytes() == (
        chain["seed0"] / "results.csv").read_bytes()


def test_evaluate_fairness_writes_the_report_and_an_html_artifact(chain):
    assert {p.name for p in chain["report"].iterdir()} >= {"report.json", "report.md",
                                                          "report.html", "figures"}
    assert chain["html"].read_bytes() == (chain["report"] / "report.html").read_bytes()
    assert json.loads((chain["report"] / "report.json").read_text())["verdicts"]["best"]["top"]


def test_evaluate_fairness_draws_the_same_report_in_a_process_beside_the_tracking(chain, tmp_path):
    ran = []

    evaluate_stage.run(chain["spec"], [chain["seed0"]], tmp_path / "beside",
                       alongside=lambda: ran.append(os.getpid()))
    evaluate_stage.run(chain["spec"], [chain["seed0"]], tmp_path / "inline")

    assert ran == [os.getpid()]  # `alongside` (the tracking) runs in this process
    files = sorted(p.relative_to(tmp_path / "inline") for p in (tmp_path / "inline").rglob("*")
                   if p.is_file())
    assert len([f for f in files if f.suffix == ".png"]) >= 4
    assert files == sorted(p.relative_to(tmp_path / "beside")
                           for p in (tmp_path / "beside").rglob("*") if p.is_file())
    for name in files:
        assert (tmp_path / "beside" / name).read_bytes() == (tmp_path / "inline" / name
                                                             ).read_bytes(), name
    assert not multiprocessing.active_children()


def test_a_failure_drawing_the_report_is_raised_once_the_tracking_is_done(chain, tmp_path,
                                                                         monkeypatch):
    import pflpipe.report.report_writer

    def broken(report, out_dir, drawn=None):
        raise DataError(f"no room for the figures in {out_dir}")

    monkeypatch.setattr(pflpipe.report.report_writer, "write_report", broken)
    ran = []
    with pytest.raises(DataError, match="no room for the figures in .*/report"):
        evaluate_stage.run(chain["spec"], [chain["seed0"]], tmp_path / "report",
                           alongside=lambda: ran.append(1))
    assert ran == [1] and not multiprocessing.active_children()


def test_a_failure_of_the_tracking_is_raised_after_the_drawing_ends(chain, tmp_path):
    def store_gone():
        raise TrackingError("MLflow log_batch at sqlite:///x.db failed: disk I/O error")

    with pytest.raises(TrackingError, match="disk I/O error"):
        evaluate_stage.run(chain["spec"], [chain["seed0"]], tmp_path / "report",
                           alongside=store_gone)
    assert (tmp_path / "report" / "report.html").is_file()  # the child finished, then the raise
    assert not multiprocessing.active_children()


def test_evaluate_fairness_names_each_seeds_directory_in_its_report_metadata(chain):
    # The pipeline's output (the report artifact) names the seed directories the CLI publishes
    assert chain["report_artifact"].metadata["seed_dirs"] == {"0": str(chain["seed0"])}


def test_evaluate_fairness_logs_a_run_per_algorithm_under_the_parent(chain):
    """The training stages take no run id (they are cached); evaluate_fairness logs each seed."""
    client = mlflow.MlflowClient(chain["parent"].tracking_uri)
    runs = client.search_runs([chain["parent"].experiment_id],
                              f"tags.mlflow.parentRunId = '{chain['parent'].run_id}'")
    assert {r.info.run_name: r.data.tags["stage"] for r in runs} == {
        "fedavg": "warm_start_fedavg", "local": "train_local", "fedper": "personalize",
        "persfl": "distill_grid_search"}
    parent = client.get_run(chain["parent"].run_id)
    assert any(key.startswith("fedper.test.") for key in parent.data.metrics)
    assert parent.data.tags["partition_hash.seed-0"] == json.loads(
        (chain["partition"] / "manifest.json").read_text())["content_hash"]


def test_evaluate_fairness_logs_the_cached_warm_start_with_round_histories(chain):
    client = mlflow.MlflowClient(chain["parent"].tracking_uri)
    (warm,) = client.search_runs([chain["parent"].experiment_id],
                                 f"tags.mlflow.parentRunId = '{chain['parent'].run_id}' and "
                                 "tags.stage = 'warm_start_fedavg'")
    assert warm.data.params["rounds"] == "3" and warm.data.metrics["last.round"] == 3
    # no run per client: every client's history is a row per round of the run's table
    assert client.search_runs([chain["parent"].experiment_id],
                              f"tags.mlflow.parentRunId = '{warm.info.run_id}'") == []
    per_client = [client_history(client, warm.info.run_id, c, "test_accuracy")
                  for c in range(N_CLIENTS)]
    assert [[r for r, _ in h] for h in per_client] == [[0, 1, 2, 3]] * N_CLIENTS
    # the algorithm's run holds the mean over its clients at every round
    means = client.get_metric_history(warm.info.run_id, "test_accuracy")
    assert [m.step for m in means] == [0, 1, 2, 3]
    assert means[-1].value == pytest.approx(sum(h[-1][1] for h in per_client) / N_CLIENTS)


def test_evaluate_fairness_logs_every_clients_own_weights_in_one_file_per_model(chain, tmp_path):
    # models/clients.pt holds each client's weights by name; fedavg's best global model is an
    # MLflow model
    import torch
    from mlflow.entities import LoggedModelStatus

    client = mlflow.MlflowClient(chain["parent"].tracking_uri)
    runs = {r.info.run_name: r for r in client.search_runs(
        [chain["parent"].experiment_id], f"tags.mlflow.parentRunId = '{chain['parent'].run_id}'")}
    for model in ("local", "fedper", "persfl"):
        path = client.download_artifacts(runs[model].info.run_id, "models/clients.pt",
                                         str(tmp_path / model))
        logged = torch.load(path, weights_only=True)
        assert sorted(logged) == [f"client_{c:04d}" for c in range(N_CLIENTS)]
        for name, state in logged.items():
            saved = torch.load(chain["seed0"] / model / "models" / f"{name}.pt", weights_only=True)
            assert state.keys() == saved.keys()
            assert all(torch.equal(state[k], v) for k, v in saved.items()), (model, name)
    (model,) = client.search_logged_models([chain["parent"].experiment_id])
    assert (model.name, model.status) == ("fedavg-global", LoggedModelStatus.READY)
    loaded = mlflow.pytorch.load_model(model.artifact_location)
    state = torch.load(chain["seed0"] / "fedavg" / "models" / "global_best_val.pt",
                       weights_only=True)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_component_compiles_alone_on_the_project_image_without_pip(component, tmp_path):
    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(component, str(path))
    ir = yaml.safe_load(path.read_text())
    (executor,) = ir["deploymentSpec"]["executors"].values()
    container = executor["container"]
    assert container["image"] == PFLPIPE_IMAGE
    assert "pip install" not in " ".join(container["command"])


def test_default_image_is_the_specs_default():
    assert PFLPIPE_IMAGE == Spec.model_fields["resources"].default_factory().image


@pytest.mark.parametrize("path", sorted((REPO / "components").glob("[!_]*.py")),
                         ids=lambda p: p.stem)
def test_component_module_is_a_thin_shim(path):
    assert len(path.read_text().splitlines()) <= 40


def test_persfl_history_runs_from_each_teacher_to_the_chosen_student(chain):
    """history.csv replays the grid's training of each chosen (λ, T) epoch by epoch."""
    rows = read_rows(chain["persfl"] / "history.csv")
    results = {int(r["client"]): float(r["accuracy"])
               for r in read_rows(chain["persfl"] / "results.csv")
               if r["split"] == "test" and r["selection"] == "best_val"}
    teachers = {int(r["client"]): int(r["teacher_round"])
                for r in read_rows(chain["persfl"] / "chosen.csv")}
    rounds = {(int(r["round"]), int(r["client"])): float(r["accuracy"])
              for r in read_rows(chain["checkpoints"] / "round_metrics.csv")
              if r["split"] == "test"}
    test = {(int(r["client"]), int(r["round"])): float(r["accuracy"])
            for r in rows if r["split"] == "test"}
    assert sorted({e for _, e in test}) == [0, 1]          # distillation epochs: 1
    for client in range(N_CLIENTS):
        assert test[(client, 0)] == pytest.approx(rounds[(teachers[client], client)], abs=1e-6)
        assert test[(client, 1)] == pytest.approx(results[client], abs=1e-6)


def read_rows(path: Path) -> list[dict]:
    import csv

    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_pipeline_started_without_a_parent_run_opens_one_in_its_last_stage(chain, tmp_path):
    """A compiled pipeline uploaded and started in the KFP UI has no parent run id: with a
    tracking URI, evaluate_fairness opens the parent, logs every seed into it and finishes it."""
    parent = chain["parent"]
    outputs = {name: artifact(kind, tmp_path, name) for name, kind in [
        ("report", dsl.Artifact), ("html", dsl.HTML), ("summary", dsl.Markdown)]}

    # a spec of its own (its description): the chain's spec on the same results would be a rerun
    # with nothing changed, whose parent points at the chain's run (report_cache) instead
    spec = chain["spec"].model_copy(update={"experiment": chain["spec"].experiment.model_copy(
        update={"description": "started in the KFP UI"})})
    evaluate_fairness.python_func(
        spec_json=spec.model_dump_json(by_alias=True),
        results=[dsl.Model(name="seed0", uri=str(chain["seed0"]))], kfp_run_id="kfp-ui-run",
        tracking_uri=parent.tracking_uri, experiment=parent.experiment, parent_run_id="",
        **outputs)

    client = mlflow.MlflowClient(parent.tracking_uri)
    (run,) = client.search_runs([parent.experiment_id], "tags.kfp_run_id = 'kfp-ui-run'")
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "tiny · fedavg+persfl+fedper · seed 0"
    assert any(key.startswith("persfl.test.") for key in run.data.metrics)
    algorithms = client.search_runs([parent.experiment_id],
                                    f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert sorted(r.info.run_name for r in algorithms) == ["fedavg", "fedper", "local", "persfl"]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run"]["MLflow run"].startswith(run.info.run_id)


def test_the_compiled_pipeline_tracks_to_the_specs_server_by_default(tmp_path):
    spec = parse_spec(TINY.format(out=tmp_path).replace(
        f"sqlite:///{tmp_path}/mlflow.db", "http://mlflow.example:5000"))
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(build_pipeline(spec), str(path))

    parameters = yaml.safe_load(path.read_text())["root"]["inputDefinitions"]["parameters"]

    assert parameters["tracking_uri"]["defaultValue"] == "http://mlflow.example:5000"
    assert parameters["parent_run_id"]["defaultValue"] == ""
