"""`pflpipe run` against tracking faults, with a real `mlflow server` on 127.0.0.1.

- A server that is down (nothing listens) or frozen (the connection opens, nothing answers) fails
  the run within seconds, exit 1, naming the server: MLflow's own retries took 256 s.
- A run killed with SIGKILL cannot end its MLflow runs; the next run of the spec marks them
  KILLED. Both runs name the server with credentials in the URI (basic auth), which reach no
  output, log, parameter or tag. That next run is a regression (`gaussian`) spec run to its
  report, with a seed at the top of its range (2³² − 1) that must survive the pipeline exactly.
"""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from client_tables import client_history, client_table
from mlflow import MlflowClient

from pflpipe.tracking.vocabulary import CLIENT_HISTORY_TABLE, CLIENTS_TABLE

pytestmark = [pytest.mark.server, pytest.mark.slow]

PFLPIPE = str(Path(sys.executable).with_name("pflpipe"))
SEED = 2**32 - 1
PASSWORD = "pw-" + uuid.uuid4().hex[:12]
GAUSSIAN = """\
experiment: {{name: gauss, seeds: [{seed}], output_dir: results}}
dataset: {{name: gaussian, n_min: 10, n_max: 30}}
partition: {{strategy: natural, n_clients: 4, min_samples: 5}}
model: {{architecture: mlp, hidden: [4]}}
federation: {{rounds: 2, lr: 0.01}}
personalization: [{{name: fedper, rounds: 2}}]
tracking: {{uri: '{uri}', experiment: {experiment}}}
"""


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}


def run(work: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([PFLPIPE, "run", "spec.yaml"], cwd=work, env=env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("fault", ["down", "frozen"])
def test_run_fails_in_seconds_naming_a_server_that_does_not_answer(tmp_path, monkeypatch, capsys,
                                                                   fault):
    from pflpipe.cli import main

    monkeypatch.chdir(tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        if fault == "frozen":
            listener.listen(8)  # the kernel accepts connections; nobody ever answers
        else:
            listener.close()    # nothing listens: connections are refused
        uri = f"http://127.0.0.1:{port}"
        (tmp_path / "spec.yaml").write_text(GAUSSIAN.format(seed=0, uri=uri, experiment="x"))

        started = time.monotonic()
        code = main(["run", "spec.yaml"])  # MLflow's own retries took 256 s
        seconds = time.monotonic() - started

    err = capsys.readouterr().err
    print(f"{fault} server: exit {code} after {seconds:.1f} s")
    assert code == 1
    reason = "no answer within 5 s" if fault == "frozen" else "Connection refused"
    assert f"error: the MLflow tracking server at {uri} does not answer (" in err
    assert reason in err and "tracking.enabled: false" in err
    assert "Traceback" not in err and "unexpected" not in err


@pytest.fixture(scope="module")
def killed_then_rerun(tmp_path_factory, mlflow_server):
    """Kill a first run (SIGKILL, its whole process group) once its parent run is open; rerun."""
    work = tmp_path_factory.mktemp("killed")
    experiment = f"faults-{uuid.uuid4().hex[:8]}"
    # Credentials in the URI: sent as basic auth by every process, never printed or logged.
    uri = mlflow_server.replace("http://", f"http://alice:{PASSWORD}@")
    (work / "spec.yaml").write_text(GAUSSIAN.format(seed=SEED, uri=uri, experiment=experiment))
    client = MlflowClient(mlflow_server)
    first = subprocess.Popen([PFLPIPE, "run", "spec.yaml"], cwd=work, env=env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    deadline = time.monotonic() + 300
    while not _runs(client, experiment) and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    [killed] = _runs(client, experiment)
    assert killed.info.status == "RUNNING"
    second = run(work)
    assert second.returncode == 0, second.stdout + second.stderr
    return work, client, experiment, killed.info.run_id, second


def _runs(client, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], "tags.pflpipe_pid != ''")


def test_next_run_marks_the_killed_run_killed(killed_then_rerun):
    work, client, experiment, killed_id, second = killed_then_rerun

    parents = {run.info.run_id: run.info.status for run in _runs(client, experiment)}

    assert parents.pop(killed_id) == "KILLED"
    assert list(parents.values()) == ["FINISHED"]
    assert f"MLflow run {killed_id} was left RUNNING by process" in second.stderr
    leftovers = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                                   f"tags.root_run_id = '{killed_id}'")
    assert all(run.info.status != "RUNNING" for run in leftovers)


def test_credentials_of_the_uri_reach_no_output_log_or_run(killed_then_rerun):
    work, client, experiment, _, second = killed_then_rerun
    [parent] = [r for r in _runs(client, experiment) if r.info.status == "FINISHED"]
    runs = [parent, *client.search_runs([parent.info.experiment_id],
                                        f"tags.root_run_id = '{parent.info.run_id}'")]

    assert PASSWORD not in second.stdout + second.stderr
    for log in (work / "results" / "logs").rglob("*"):
        assert not log.is_file() or PASSWORD not in log.read_text(errors="replace"), log
    for run in runs:
        assert PASSWORD not in repr(run.data.params) + repr(run.data.tags), run.info.run_name


def test_regression_run_reports_negative_mse_per_client(killed_then_rerun):
    work, client, experiment, _, second = killed_then_rerun
    report = json.loads((work / "results" / "latest" / "report" / "report.json").read_text())
    rows = list(csv.DictReader((work / "results" / "latest" / f"seed-{SEED}" / "results.csv")
                               .open()))

    assert report["unit"] == "neg_mse"
    assert set(report["models"]) == {"local", "fedavg", "fedper"}
    tests = {(r["model"], r["client"]): float(r["loss"]) for r in rows
             if r["split"] == "test" and r["selection"] == "best_val" and not r["scope"]}
    for model in ("local", "fedavg", "fedper"):
        per_client = report["models"][model]["per_client"]
        assert {c: v["accuracy"] for c, v in per_client.items()} == {
            str(c): -tests[(model, str(c))] for c in range(4)}
    qoi = report["models"]["fedper"]["per_client"]["0"]["qoi"]
    assert qoi == pytest.approx(min(tests[("fedavg", "0")], tests[("local", "0")])
                                - tests[("fedper", "0")], rel=1e-12)
    # fedper is the only personalized model: nothing to compare, no winner named
    assert ("Best performing on test: nothing to compare: fedper is the only personalized "
            "model") in second.stdout


def test_regression_runs_log_the_mse_as_loss_and_no_accuracy(killed_then_rerun):
    """Algorithm runs and their client tables of a regression hold test_loss (the MSE), never a
    NaN accuracy; the report names its score −MSE."""
    work, client, experiment, _, _ = killed_then_rerun
    rows = list(csv.DictReader((work / "results" / "latest" / f"seed-{SEED}" / "results.csv")
                               .open()))
    [parent] = [r for r in _runs(client, experiment) if r.info.status == "FINISHED"]
    runs = client.search_runs([parent.info.experiment_id],
                              f"tags.root_run_id = '{parent.info.run_id}'")
    algorithms = [r for r in runs if r.data.tags.get("algorithm")]

    assert len(algorithms) == 3
    for run in runs:
        assert not [name for name in run.data.metrics if "accuracy" in name], run.info.run_name
    fedper = next(r for r in algorithms if r.info.run_name == "fedper")
    for table in (CLIENTS_TABLE, CLIENT_HISTORY_TABLE):
        assert not [k for k in client_table(client, fedper.info.run_id, table)[0]
                    if "accuracy" in k], table
    (fedper_0,) = [r for r in client_table(client, fedper.info.run_id) if r["client"] == 0]
    mse = next(float(r["loss"]) for r in rows if (r["model"], r["client"], r["split"],
                                                  r["selection"], r["scope"])
               == ("fedper", "0", "test", "best_val", ""))
    assert fedper_0["best.test_loss"] == pytest.approx(mse, rel=1e-6)
    history = client_history(client, fedper.info.run_id, 0, "test_loss")
    assert [r for r, _ in history] == [0, 1, 2]  # round 0: the warm start it begins from
    text = (work / "results" / "latest" / "report" / "report.md").read_text()
    assert "### Per-client −MSE" in text and "| Avg −MSE |" in text


def test_the_largest_seed_survives_the_pipeline_exactly(killed_then_rerun):
    work, client, experiment, _, _ = killed_then_rerun
    latest = work / "results" / "latest"
    rows = list(csv.DictReader((latest / f"seed-{SEED}" / "results.csv").open()))
    report = json.loads((latest / "report" / "report.json").read_text())

    assert sorted(p.name for p in latest.glob("seed-*")) == [f"seed-{SEED}"]
    assert {row["seed"] for row in rows} == {str(SEED)}
    assert report["splits"]["test"]["seeds"] == [SEED]
    [parent] = [r for r in _runs(client, experiment) if r.info.status == "FINISHED"]
    assert parent.data.tags["seeds"] == str(SEED)
