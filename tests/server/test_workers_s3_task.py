"""A sharded stage's workers get their task and return their result through S3 (moto on 127.0.0.1).

What a Kubeflow Trainer job's pods do (pflpipe.pipelines.trainjob): each runs ``torchrun --module
pflpipe.engine.distributed s3://bucket/prefix`` with only the endpoint and credentials in its
environment. Real worker processes, real gloo on 127.0.0.1, a real S3 server; the result equals
the local-folder run's.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pflpipe.engine import distributed
from pflpipe.errors import DataError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, warm_start_fedavg
from pflpipe.storage import ENDPOINT_ENV
from pflpipe.storage.s3 import S3Store

SPEC = """\
experiment: {{name: workers-s3, output_dir: {root}/out}}
dataset: {{name: digits}}
partition: {{strategy: ds3, n_clients: 8, min_samples: 10}}
federation: {{rounds: 2, batch_size: 16, lr: 0.05}}
tracking: {{enabled: false}}
engine: {{device: cpu, workers: 2}}
storage: {storage}
"""


def _spec(root: Path, storage: str):
    return parse_spec(SPEC.format(root=root, storage=storage))


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
    # Assert: rank 0 printed its rounds and wrote the result, the local run's numbers
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[2] for line in done.stdout.splitlines()
            if line.startswith("pflpipe-worker round ")] == ["[1,", "[2,"]
    assert task.exists("result.pt")
    _assert_same(local, distributed.read_result(task))


def test_a_library_error_of_the_workers_comes_back_through_s3_as_it_is(tmp_path, s3_server,
                                                                       bucket):
    # Prepare: a task whose partition folder does not exist (what a pod without the component's
    # artifact paths meets: docs/cluster.md)
    spec = _spec(tmp_path, f"{{kind: s3, bucket: {bucket}, endpoint_url: {s3_server}}}")
    args = (spec, 0, tmp_path / "no-partition")
    task = S3Store(bucket, "workers/t", endpoint_url=s3_server)
    # Execute / Assert: the workers' DataError, raised by the launcher; left in S3 to look at
    with pytest.raises(DataError, match=f"{tmp_path / 'no-partition'} is not a partition"):
        distributed.launch(2, warm_start_fedavg._recipe, args, task=task)
    assert task.list() == ["error.pkl", "task.pkl"]


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
