"""The tracker against a real `mlflow server` (sqlite backend) on 127.0.0.1.

A small driver plays the stages the way the pipeline will: the CLI opens the parent run, each
stage opens its child run under it, and per-algorithm stages open one run per client.
"""

import subprocess
import uuid
from pathlib import Path

import matplotlib
import pytest
import torch
from mlflow import MlflowClient

import pflpipe
from pflpipe.errors import TrackingError
from pflpipe.spec import parse_spec
from pflpipe.tracking import child_run, open_parent_run, parent_tracker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.server

N_CLIENTS, ROUNDS = 3, 3
ALGORITHMS = ("fedper", "ditto")


def spec_text(uri: str, experiment: str) -> str:
    return f"""\
experiment:
  name: tracking-test
  seeds: [0]
dataset:
  name: digits
partition:
  strategy: iid
  n_clients: {N_CLIENTS}
federation:
  rounds: {ROUNDS}
personalization:
  - name: persfl
{"".join(f"  - name: {name}{chr(10)}" for name in ALGORITHMS)}tracking:
  uri: {uri}
  experiment: {experiment}
"""


def accuracy(algorithm: str, client: int, round_idx: int) -> float:
    return round(0.5 + 0.1 * round_idx + 0.01 * client + 0.001 * ALGORITHMS.index(algorithm), 4)


def model_of(client: int) -> dict[str, torch.Tensor]:
    return {"head.weight": torch.full((2, 3), float(client)), "head.bias": torch.arange(2.0)}


def run_stages(spec, parent) -> None:
    """Log what the stages will log, through the same entry points the components call."""
    args = (spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id)
    with child_run(*args, "warm_start_fedavg") as stage:
        stage.log_history([{"round": r, "mean_val_loss": 1.0 / (r + 1)} for r in range(ROUNDS)])
    for algorithm in ALGORITHMS:
        tags = {"stage": "personalize", "algorithm": algorithm}
        with child_run(*args, f"personalize/{algorithm}", tags) as stage:
            stage.log_params({"lam": 0.1})
            for client in range(N_CLIENTS):
                with stage.child(f"client-{client}", {"client_id": str(client)}) as run:
                    run.log_history([{"round": r, "val_accuracy": accuracy(algorithm, client, r)}
                                     for r in range(ROUNDS)])
                    run.log_metrics({"test_accuracy": accuracy(algorithm, client, ROUNDS)})
                    run.log_state_dict(model_of(client), f"client_{client:04d}")
    with child_run(*args, "distill_grid_search", {"algorithm": "persfl"}) as stage:
        for client in range(N_CLIENTS):
            with stage.child(f"client-{client}", {"client_id": str(client)}) as run:
                run.log_params({"teacher_round": client, "lam": 0.5, "temperature": 5.0})
                run.log_metrics({"val_accuracy": 0.8, "test_accuracy": 0.79})
    final = parent_tracker(spec.tracking, parent.tracking_uri, parent.run_id, parent.experiment)
    final.log_metrics({"JI": 0.97, "std": 0.03})
    final.log_text("# Fairness report\n", "report/report.md")
    figure, axes = plt.subplots()
    axes.bar(range(N_CLIENTS), [0.8] * N_CLIENTS)
    final.log_figure(figure, "figures/accuracy_per_client.png")
    plt.close(figure)


@pytest.fixture(scope="module")
def tracked(mlflow_server):
    """One parent run with the whole driver logged under it, against the session's server."""
    text = spec_text(mlflow_server, f"tracking-{uuid.uuid4().hex[:8]}")
    spec = parse_spec(text)
    parent = open_parent_run(spec, seed=0, spec_yaml=text, tags={"kfp_run": "local-1"})
    run_stages(spec, parent)
    parent.finish()
    return spec, parent, text, MlflowClient(mlflow_server)


def children(client, parent_id: str, experiment_id: str):
    runs = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    return {run.info.run_name: run for run in runs}


def test_parent_run_holds_tags_params_spec_and_fairness(tracked):
    spec, parent, text, client = tracked

    run = client.get_run(parent.run_id)

    assert run.info.status == "FINISHED"
    assert run.data.tags["spec_hash"] == spec.content_hash()
    assert run.data.tags["seed"] == "0" and run.data.tags["kfp_run"] == "local-1"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(pflpipe.__file__).parent)
    if commit.returncode == 0:
        assert run.data.tags["git_commit"] == commit.stdout.strip()
    assert run.data.params["partition.n_clients"] == str(N_CLIENTS)
    assert run.data.params["personalization.2.name"] == "ditto"
    assert run.data.metrics == {"JI": 0.97, "std": 0.03}
    artifacts = {a.path for a in client.list_artifacts(parent.run_id)}
    assert {"spec.yaml", "spec_resolved.yaml", "report", "figures"} <= artifacts
    spec_file = client.download_artifacts(parent.run_id, "spec.yaml")
    assert open(spec_file).read() == text
    assert [a.path for a in client.list_artifacts(parent.run_id, "figures")] == [
        "figures/accuracy_per_client.png"]


def test_stage_runs_are_children_of_the_parent(tracked):
    _, parent, _, client = tracked

    stages = children(client, parent.run_id, parent.experiment_id)

    assert set(stages) == {"warm_start_fedavg", "personalize/fedper", "personalize/ditto",
                           "distill_grid_search"}
    assert {run.info.status for run in stages.values()} == {"FINISHED"}
    assert stages["personalize/ditto"].data.tags["stage"] == "personalize"
    assert stages["personalize/ditto"].data.tags["algorithm"] == "ditto"
    history = client.get_metric_history(stages["warm_start_fedavg"].info.run_id, "mean_val_loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, 1 / 3)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_client_runs_carry_tags_histories_and_models(tracked, algorithm, tmp_path):
    _, parent, _, client = tracked
    stage = children(client, parent.run_id, parent.experiment_id)[f"personalize/{algorithm}"]

    clients = children(client, stage.info.run_id, parent.experiment_id)

    assert sorted(clients) == [f"client-{k}" for k in range(N_CLIENTS)]
    for k in range(N_CLIENTS):
        run = clients[f"client-{k}"]
        assert {key: run.data.tags[key] for key in ("client_id", "algorithm", "stage",
                                                    "root_run_id")} == {
            "client_id": str(k), "algorithm": algorithm, "stage": "personalize",
            "root_run_id": parent.run_id}
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert [(m.step, m.value) for m in history] == [
            (r, accuracy(algorithm, k, r)) for r in range(ROUNDS)]
        assert run.data.metrics["test_accuracy"] == accuracy(algorithm, k, ROUNDS)
        path = client.download_artifacts(run.info.run_id, f"models/client_{k:04d}.pt", tmp_path)
        loaded = torch.load(path, weights_only=True)
        assert all(torch.equal(loaded[key], value) for key, value in model_of(k).items())


def test_distillation_client_runs_record_teacher_round_and_grid_choice(tracked):
    _, parent, _, client = tracked
    stage = children(client, parent.run_id, parent.experiment_id)["distill_grid_search"]

    clients = children(client, stage.info.run_id, parent.experiment_id)

    assert {name: run.data.params for name, run in clients.items()} == {
        f"client-{k}": {"teacher_round": str(k), "lam": "0.5", "temperature": "5.0"}
        for k in range(N_CLIENTS)}


def test_every_run_of_the_pipeline_is_found_by_its_root_tag(tracked):
    _, parent, _, client = tracked

    runs = client.search_runs([parent.experiment_id], f"tags.root_run_id = '{parent.run_id}'")

    stages, per_client = 4, N_CLIENTS * (len(ALGORITHMS) + 1)
    assert len(runs) == stages + per_client


def test_child_run_that_raises_is_failed_and_the_error_propagates(tracked):
    spec, parent, _, client = tracked

    with pytest.raises(RuntimeError, match="client 1 diverged"):
        with child_run(spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id,
                       "train_local") as stage:
            with stage.child("client-1", {"client_id": "1"}):
                raise RuntimeError("client 1 diverged")

    query = f"tags.root_run_id = '{parent.run_id}' and tags.stage = 'train_local'"
    runs = client.search_runs([parent.experiment_id], query)
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [
        ("client-1", "FAILED"), ("train_local", "FAILED")]


def test_long_histories_are_batched_beyond_the_per_request_limit(tracked):
    spec, parent, _, client = tracked
    rows = [{"round": r, "loss": 1.0 / (r + 1), "accuracy": r / 700, "lr": 0.1} for r in range(700)]

    with child_run(spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id,
                   "long_history") as stage:
        stage.log_history(rows)  # 2,100 metrics: three requests of at most 1,000

    history = client.get_metric_history(stage.run_id, "accuracy")
    assert [m.step for m in history] == list(range(700))


def test_child_run_under_unknown_parent_names_it(tracked):
    spec, parent, _, _ = tracked

    with pytest.raises(TrackingError, match="0123456789abcdef"):
        with child_run(spec.tracking, parent.tracking_uri, parent.experiment,
                       "0123456789abcdef", "partition_data"):
            pass


def test_child_run_in_another_experiment_is_refused(tracked):
    spec, parent, _, _ = tracked

    with pytest.raises(TrackingError, match="not 'some-other-experiment'"):
        with child_run(spec.tracking, parent.tracking_uri, "some-other-experiment",
                       parent.run_id, "partition_data"):
            pass
