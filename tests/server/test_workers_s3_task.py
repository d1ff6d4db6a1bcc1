"""A sharded stage's workers get their task and return their result through S3 (moto on 127.0.0.1).

What a Kubeflow Trainer job's pods do (pflpipe.pipelines.trainjob): each runs ``torchrun --module
pflpipe.engine.distributed s3://bucket/prefix`` with only the endpoint and credentials in its
environment, and none of the launcher's files (the task carries them). Real worker processes,
real gloo on 127.0.0.1, a real S3 server; the result equals the local-folder run's.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pflpipe import events
from pflpipe.engine import distributed
from pflpipe.errors import DataError, StorageError
from pflpipe.layout import WORKER_RESULT
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize, warm_start_fedavg
from pflpipe.storage import ENDPOINT_ENV
from pflpipe.storage.s3 import S3Store

SPEC = """\
experiment: {{name: workers-s3, output_dir: {root}/out}}
dataset: {{name: digits}}
partition: {{strategy: ds3, n_clients: 8, min_samples: 10}}
federation: {{rounds: 2, batch_size: 16, lr: 0.05}}
personalization: [{{name: scaffold, rounds: 2}}]
tracking: {{enabled: false}}
engine: {{device: cpu, workers: 2}}
storage: {storage}
"""


def _spec(root: Path, storage: str):
    return parse_spec(SPEC.format(root=root, storage=storage))


@pytest.fixture(scope="module")
def local_personalize(local_run):
    """(root, result) of SCAFFOLD's 2 workers from the warm start's final model, local files."""
    root, warm = local_run
    (root / "warm").mkdir()
    torch.save(warm.global_params, root / "warm" / "round_0002.pt")
    (root / "warm" / "progress.json").write_text(json.dumps({"rounds_completed": 2}))
    spec = _spec(root, f"{{kind: local, path: {root}/store}}")
    args = (spec, 0, "scaffold", root / "partition", root / "warm" / "round_0002.pt",
            "personalize", None)
    return root, distributed.launch(2, personalize._recipe, args)


def _torchrun(uri: str, endpoint: str, cwd: Path) -> subprocess.CompletedProcess:
    """2 workers on this node given only the task URI and the endpoint (a TrainJob runs 1 per
    node on N nodes).
    """
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "--module", "pflpipe.engine.distributed", uri],
        env={**os.environ, ENDPOINT_ENV[0]: endpoint}, cwd=cwd, capture_output=True, text=True,
        timeout=600)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """(root, args' partition, result) of the warm start's 2 workers through a local folder."""
    root = tmp_path_factory.mktemp("workers-s3")
    spec = _spec(root, f"{{kind: local, path: {root}/store}}")
    partition_data.run(spec, 0, root / "partition")
    result = distributed.launch(2, warm_start_fedavg._recipe, (spec, 0, root / "partition"))
    return root, result


def _assert_same(a, b) -> None:
    assert (a.rounds_completed, a.stopped_early) == (b.rounds_completed, b.stopped_early) == (2,
                                                                                              False)
    assert a.global_params.keys() == b.global_params.keys()
    for key in a.global_params:
        torch.testing.assert_close(a.global_params[key], b.global_params[key], atol=0, rtol=0)
    # rounds × clients × splits of loss and accuracy, in the same order
    assert len(a.rows) == len(b.rows) > 0
    for row_a, row_b in zip(a.rows, b.rows, strict=True):
        assert row_a.keys() == row_b.keys()
        for key, value in row_a.items():
            assert row_b[key] == pytest.approx(value, abs=1e-6), key


def test_launch_through_an_s3_task_store_equals_the_local_folder_run(local_run, s3_server,
                                                                      bucket, monkeypatch):
    # Prepare: the same stage with its checkpoints in S3; the workers' task beside them
    root, local = local_run
    monkeypatch.delenv(ENDPOINT_ENV[0], raising=False)  # launch hands the workers the endpoint
    spec = _spec(root, f"{{kind: s3, bucket: {bucket}, prefix: run, endpoint_url: {s3_server}}}")
    args = (spec, 0, root / "partition")
    recipe = warm_start_fedavg._recipe(*args)
    task = distributed.task_store(recipe.store, warm_start_fedavg._recipe, args)
    assert task.uri.startswith(f"s3://{bucket}/run/checkpoints/warm_start_fedavg/")
    assert task.uri.rsplit("/", 2)[1] == "workers"
    # Execute
    reported = []
    result = distributed.launch(2, warm_start_fedavg._recipe, args,
                                on_round=lambda r, rows: reported.append(r), task=task)
    # Assert: the local run's numbers; rank 0 checkpointed into S3; the task and result are gone
    _assert_same(local, result)
    assert reported == [1, 2]
    store = S3Store(bucket, endpoint_url=s3_server)
    keys = store.list("run")
    assert f"{recipe.store.prefix}/progress.json" in keys
    assert not [key for key in keys if "/workers/" in key]


def test_torchrun_workers_given_only_an_s3_uri_write_the_local_run_result(local_run, s3_server,
                                                                          bucket, monkeypatch):
    # Prepare: the task written as a Trainer-job launcher would (`task_store`, `write_task`);
    # the workers' environment has the endpoint (as a TrainJob's pods do), no launcher watches
    root, local = local_run
    spec = _spec(root, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    args = (spec, 0, root / "partition")
    checkpoints = S3Store(bucket, "checkpoints/warm_start_fedavg/x", endpoint_url=s3_server)
    task = distributed.task_store(checkpoints, warm_start_fedavg._recipe, args)
    distributed.write_task(task, warm_start_fedavg._recipe, args)
    env = {**os.environ, ENDPOINT_ENV[0]: s3_server}
    # Execute: torchrun, 2 processes on this node (a TrainJob runs 1 per node on N nodes)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "--module", "pflpipe.engine.distributed", task.uri],
        env=env, capture_output=True, text=True, timeout=600)
    # Assert: rank 0 wrote a progress event per round into its log, and the result: the local
    # run's numbers
    assert done.returncode == 0, done.stderr[-3000:]
    progress = [e for e in map(events.parse, done.stdout.splitlines())
                if e is not None and e["event"] == "progress"]
    assert [(e["round"], e["rounds"]) for e in progress] == [(1, 2), (2, 2)]
    assert task.exists(WORKER_RESULT)
    _assert_same(local, distributed.read_result(task))


def test_a_library_error_of_the_workers_comes_back_through_s3_as_it_is(tmp_path, s3_server,
                                                                       bucket):
    # Prepare: a task whose partition folder holds no partition
    spec = _spec(tmp_path, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    (tmp_path / "no-partition").mkdir()
    args = (spec, 0, tmp_path / "no-partition")
    task = S3Store(bucket, "workers/t", endpoint_url=s3_server)
    # Execute / Assert: the workers' DataError (about their copy of the folder), raised by the
    # launcher; left in S3 to look at
    with pytest.raises(DataError, match="/no-partition is not a partition directory"):
        distributed.launch(2, warm_start_fedavg._recipe, args, task=task)
    assert task.list() == ["error.pkl", "task.pkl"]


def test_a_task_naming_a_path_that_does_not_exist_is_not_written(tmp_path, s3_server, bucket):
    spec = _spec(tmp_path, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    task = S3Store(bucket, "workers/t", endpoint_url=s3_server)
    with pytest.raises(DataError, match=f"^{tmp_path / 'gone'} does not exist; the sharded "
                                        "stage's workers are given a copy"):
        distributed.write_task(task, warm_start_fedavg._recipe, (spec, 0, tmp_path / "gone"))
    assert task.list() == []


def test_torchrun_workers_need_none_of_the_launchers_files(local_personalize, s3_server, bucket,
                                                           tmp_path):
    # Prepare: SCAFFOLD's task from a copy of the partition and of the warm-start checkpoint,
    # written to S3; then the copies are deleted, so the workers can only read the task's
    root, local = local_personalize
    shutil.copytree(root / "partition", tmp_path / "partition")
    shutil.copytree(root / "warm", tmp_path / "warm")
    spec = _spec(root, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    args = (spec, 0, "scaffold", tmp_path / "partition", tmp_path / "warm" / "round_0002.pt",
            "personalize", None)
    task = distributed.task_store(personalize._recipe(*args).store, personalize._recipe, args)
    distributed.write_task(task, personalize._recipe, args)
    carried = task.list("files")
    distributed.write_task(task, personalize._recipe, args)  # a second attempt adds nothing
    shutil.rmtree(tmp_path / "partition")
    shutil.rmtree(tmp_path / "warm")
    (tmp_path / "pod").mkdir()
    # Execute
    done = _torchrun(task.uri, s3_server, tmp_path / "pod")
    # Assert: the local-files run's numbers; every file once, under its content's SHA-256
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_same(local, distributed.read_result(task))
    files = [root / "warm" / "round_0002.pt",
             *(p for p in (root / "partition").rglob("*") if p.is_file())]
    assert carried == task.list("files") == sorted(
        {f"files/{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in files})


def test_worker_missing_a_carried_file_names_its_object_and_the_source(tmp_path, s3_server,
                                                                       bucket):
    # Prepare: a task whose checkpoint-file copy was deleted from S3
    spec = _spec(tmp_path, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    (tmp_path / "partition").mkdir()
    start = tmp_path / "round_0002.pt"
    start.write_bytes(b"a checkpoint")
    args = (spec, 0, "scaffold", tmp_path / "partition", start, "personalize", None)
    task = S3Store(bucket, "workers/missing", endpoint_url=s3_server)
    distributed.write_task(task, personalize._recipe, args)
    key = f"files/{hashlib.sha256(start.read_bytes()).hexdigest()}"
    task.delete(key)
    # Execute
    done = _worker(task.uri, {ENDPOINT_ENV[0]: s3_server})
    # Assert: one line, before the worker joins the others
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"worker 0: s3://{bucket}/workers/missing/{key} (a copy of the launcher's {start}) is "
        "missing from its task; write the task again before starting the workers")


def test_workers_refuse_local_checkpoints_when_the_task_is_in_s3(local_run, s3_server, bucket):
    # Prepare: an S3 task of a spec that checkpoints into a local folder (no other pod sees it)
    root, _ = local_run
    spec = _spec(root, f"{{kind: local, path: {root}/store}}")
    task = S3Store(bucket, "workers/local", endpoint_url=s3_server)
    distributed.write_task(task, warm_start_fedavg._recipe, (spec, 0, root / "partition"))
    # Execute
    done = _worker(task.uri, {ENDPOINT_ENV[0]: s3_server})
    # Assert: the library error, for the launcher to raise
    assert done.returncode == 1
    with pytest.raises(StorageError, match=re.escape(
            f"the workers' task is in {task.uri} but the stage checkpoints into the local folder "
            f"{root}/store/checkpoints/warm_start_fedavg/")):
        distributed.read_result(task)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker(uri: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The worker entry as rank 0 of 1, as a pod runs it."""
    env = {**os.environ, **env, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    return subprocess.run([sys.executable, "-m", "pflpipe.engine.distributed", uri], env=env,
                          capture_output=True, text=True, timeout=300)


def test_worker_without_a_task_at_its_uri_names_the_uri(s3_server, bucket):
    done = _worker(f"s3://{bucket}/nothing/here", {ENDPOINT_ENV[0]: s3_server})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"worker 0: no task at s3://{bucket}/nothing/here/task.pkl; the stage that launches the "
        "workers writes it before it starts them (is TASK the launcher's URI, and its store "
        "this one?)")


def test_worker_whose_store_is_unreachable_names_the_uri_and_endpoint(bucket):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = _worker(f"s3://{bucket}/run/workers/abc", {ENDPOINT_ENV[0]: endpoint})
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith(f"worker 0: could not read its task s3://{bucket}/run/workers/abc/"
                              f"task.pkl: S3 access check of bucket '{bucket}' at {endpoint} "
                              "failed after 5 attempts")
    assert "Traceback" not in done.stderr
