"""`pflpipe run` opens the MLflow parent run in a forked child while it imports kfp.

The run the child opens is the one `open_parent_run` opens in the process itself (its owner is
the CLI's process, its spec and settings logged); the child exits once it has sent it, so no
process holds mlflow while the stages run. A second child, forked beside it, imports mlflow
when the last stage starts (`RunEnd.prepare`) and ends the run with the status the CLI sends,
so the CLI itself never imports mlflow on a run that succeeds; a store error in a child
reaches the CLI as the same error.
Each case runs in a fresh Python process (one thread, as the CLI).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

SPEC = """\
experiment: {{name: beside, output_dir: results}}
dataset: {{name: digits}}
partition: {{strategy: iid, n_clients: 2}}
tracking: {{uri: '{uri}'}}
"""
OPEN = """
import json, multiprocessing, os, sys
from pathlib import Path
from pflpipe.cli.parent_run import open_beside_kfp
from pflpipe.spec import read_spec
try:
    run_end = open_beside_kfp(read_spec(Path("spec.yaml")), Path("spec.yaml").read_text(), 2)
except Exception as err:
    print(json.dumps({"error": type(err).__name__, "message": str(err)}))
    sys.exit()
parent = run_end.parent
[waiter] = multiprocessing.active_children()
def holds_mlflow():   # pandas's compiled modules, which mlflow imports, mapped
    return any("/pandas/" in line for line in open(f"/proc/{waiter.pid}/maps"))
opened = {"run_id": parent.run_id, "pid": os.getpid(), "kfp here": "kfp" in sys.modules,
          "waiter holds mlflow": holds_mlflow()}
import sqlite3
with sqlite3.connect("mlflow.db") as db:   # not through mlflow: it stays out of this process
    [(opened["status while open"],)] = db.execute("select status from runs where run_uuid = ?",
                                                  (parent.run_id,)).fetchall()
run_end.prepare()   # the last stage started
import time
for _ in range(600):
    if holds_mlflow():
        break
    time.sleep(0.1)
opened["waiter holds mlflow then"] = holds_mlflow()
run_end.finish("FINISHED")
opened["mlflow here"] = "mlflow" in sys.modules
from mlflow import MlflowClient
opened["status"] = MlflowClient(parent.tracking_uri).get_run(parent.run_id).info.status
print(json.dumps(opened))
"""
FORKS = len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") else False


def open_beside(tmp_path: Path, uri: str) -> dict:
    (tmp_path / "spec.yaml").write_text(SPEC.format(uri=uri))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run([sys.executable, "-c", OPEN], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not FORKS, reason="one core: the parent run is opened in the process")
def test_a_child_opens_the_cli_s_parent_run_with_the_spec_and_another_ends_it_when_told(
        tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    opened = open_beside(tmp_path, uri)

    assert opened["kfp here"] and not opened["mlflow here"]   # mlflow only in the children
    assert not opened["waiter holds mlflow"] and opened["waiter holds mlflow then"]
    assert opened["status while open"] == "RUNNING"
    assert opened["status"] == "FINISHED"   # ended by the second child, told by the CLI
    run = MlflowClient(uri).get_run(opened["run_id"])
    assert run.data.tags["pflpipe_pid"] == str(opened["pid"])
    assert run.data.params["partition.n_clients"] == "2"
    assert run.info.run_name == "beside · fedavg+persfl · seed 0"   # the default entry
    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
    assert {"spec.yaml", "spec_resolved.yaml"} <= artifacts


def test_a_store_error_in_the_child_is_raised_in_the_cli(tmp_path):
    (tmp_path / "store").mkdir()

    opened = open_beside(tmp_path, f"sqlite:///{tmp_path / 'store'}")

    assert opened["error"] == "DataError"
    assert opened["message"] == (f"tracking.uri sqlite:///{tmp_path / 'store'}: "
                                 f"{tmp_path / 'store'} is a directory; name the database file, "
                                 f"e.g. sqlite:///{tmp_path / 'store' / 'mlflow.db'}")


def test_ctrl_c_on_the_process_group_ends_the_parent_run_killed(tmp_path):
    # A terminal's Ctrl-C reaches the CLI, its tasks and the child that ends the parent run;
    # the child waits for the CLI's word and ends the run KILLED (never readied beforehand:
    # the last stage never started).
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "spec.yaml").write_text(SPEC.format(uri=uri) + "federation: {rounds: 400}\n"
                                        "personalization: []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    cli = subprocess.Popen([str(Path(sys.executable).with_name("pflpipe")), "run", "spec.yaml"],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    # the header names the parent run once it is open
    run_id = next((line.split("MLflow parent run ")[1].split()[0] for line in cli.stdout
                   if "MLflow parent run" in line), None)
    assert run_id is not None, cli.stderr.read()
    time.sleep(2)   # into the pipeline's first tasks
    os.killpg(cli.pid, signal.SIGINT)

    _, err = cli.communicate(timeout=300)

    assert cli.returncode == 130, err
    assert "interrupted; finished rounds and stages are kept on disk" in err
    assert MlflowClient(uri).get_run(run_id).info.status == "KILLED"


KILL = """
import multiprocessing, os, signal
from pathlib import Path
from pflpipe.cli.parent_run import open_beside_kfp
from pflpipe.spec import read_spec
run_end = open_beside_kfp(read_spec(Path("spec.yaml")), None, 2)
run_end.prepare()
[child] = multiprocessing.active_children()
os.kill(child.pid, signal.SIGKILL)   # as the OOM killer would
try:
    run_end.finish("FINISHED")
except Exception as err:
    print(type(err).__name__, err)
"""


@pytest.mark.skipif(not FORKS, reason="one core: the parent run is opened in the process")
def test_a_killed_child_is_a_tracking_error_not_a_broken_pipe(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC.format(uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}

    done = subprocess.run([sys.executable, "-c", KILL], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)

    assert done.stdout.strip() == ("TrackingError the process that ends the MLflow parent run "
                                   "died (exit -9) without an answer"), done.stderr


def test_the_stage_that_readies_the_run_s_end_is_the_report_every_run_runs():
    from pflpipe.cli.parent_run import ENDS_AFTER
    from pflpipe.components.evaluate_fairness import evaluate_fairness
    from pflpipe.pipelines.tasklog import _stage

    assert _stage(evaluate_fairness.name) == ENDS_AFTER
