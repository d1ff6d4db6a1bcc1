"""`pflpipe run` when a stage fails: the stage's own error on screen, exit 1, no traceback, the
MLflow parent run FAILED, and what the other stages computed kept (a rerun reuses it).

The failure is real: Ditto with a learning rate of 100 (the largest the spec allows) diverges
in its second round.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

SPEC = """\
experiment: {name: failing, output_dir: results}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 4, classes_per_client: 4}
federation: {rounds: 2}
personalization:
  - {name: ditto, lr: 100, rounds: 2}
"""


def pflpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def failed(tmp_path_factory):
    work = tmp_path_factory.mktemp("failing")
    (work / "spec.yaml").write_text(SPEC)
    first = pflpipe("run", "spec.yaml", cwd=work)
    again = pflpipe("run", "spec.yaml", cwd=work)
    return work, first, again


def test_failing_stage_exits_1_with_its_own_error_and_no_traceback(failed):
    work, first, _ = failed
    assert first.returncode == 1
    assert "Traceback" not in first.stdout + first.stderr
    assert "✗ personalize[ditto] · seed 0" in first.stdout
    error = first.stderr
    assert "error: stage personalize[ditto] · seed 0 failed:" in error
    assert "DivergenceError: client " in error and "learning rate 100" in error
    log = work / "results" / "logs" / "personalize_ditto_seed_0.log"
    assert f"(its full output: {log})" in error and log.is_file()
    assert len(error.splitlines()) <= 4  # the stage's error, not a wall of runner logs


def test_parent_run_is_failed_and_the_successful_stages_are_kept(failed):
    work, first, again = failed
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("failing")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in parents] == ["FAILED", "FAILED"]
    failed_stage = [r for r in runs if r.data.tags.get("stage") == "personalize"
                    and "client_id" not in r.data.tags]
    assert {r.info.status for r in failed_stage} == {"FAILED"}
    # the cached stage tracks nothing itself: the CLI leaves its error and log in MLflow
    (run, _) = failed_stage
    assert run.info.run_name == "personalize[ditto] · seed 0"
    assert "DivergenceError: client " in run.data.tags["mlflow.note.content"]
    assert [a.path for a in client.list_artifacts(run.info.run_id, "logs")] == [
        "logs/personalize_ditto_seed_0.log"]
    assert "✓ warm_start_fedavg · seed 0" in first.stdout
    # the rerun takes the partition and the warm start from the cache, then fails the same way
    assert "↺ partition_data" in again.stdout and "↺ warm_start_fedavg" in again.stdout
    assert again.returncode == 1 and "DivergenceError" in again.stderr


def test_a_stage_refusing_its_data_file_exits_2_naming_file_and_problem(tmp_path):
    import numpy as np

    x = np.random.default_rng(0).normal(size=(40, 3))
    x[11, 2] = np.nan
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(40) % 2)
    (tmp_path / "spec.yaml").write_text(
        f"experiment: {{name: bad-data, output_dir: results}}\ndataset: {{name: arrays, root: "
        f"{tmp_path}, path: d.npz}}\npartition: {{strategy: iid, n_clients: 2}}\n"
        "tracking: {enabled: false}\n")

    done = pflpipe("run", "spec.yaml", cwd=tmp_path)

    assert done.returncode == 2, done.stderr
    assert "error: stage partition_data · seed 0 failed:" in done.stderr
    assert f"DataError: {tmp_path}/d.npz: x holds NaN or infinite values" in done.stderr
    assert "first in sample 11" in done.stderr and "Traceback" not in done.stderr
