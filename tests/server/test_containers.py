"""Every stage in its container: the CPU image built from this checkout, the quickstart under
`pflpipe run --runner docker`, and a sharded stage's workers as two containers.

A real container engine: Docker or podman's Docker API. Where `DOCKER_HOST` (or Docker's socket)
answers, that engine; else, where podman is installed, a `podman system service` of this module's
own. The image is `tests/container_image.py`'s: built once per content of the build context
(.ci/run starts that build beside the test suite; this module waits for it). Without an engine
the module is skipped, except under CI, where it fails.

The quickstart runs as a user runs it, in a working directory of its own, tracked to a real
`mlflow server` on the host's 127.0.0.1 behind a proxy that answers 401 to a request without the
user's credentials (so a task tracks only if its container got them): first killed (SIGINT, as
Ctrl-C) during the warm start, then again, resuming it; then once with `--runner subprocess`.
Every file of the two runs' published results is compared.
"""

import base64
import contextlib
import filecmp
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from ci_prep import wait_for
from container_image import builder, ensure_image, image_size
from mlflow import MlflowClient

from pflpipe.engine import distributed
from pflpipe.layout import WORKER_RESULT
from pflpipe.pipelines.containers import LABEL, run_container
from pflpipe.pipelines.trainjob import train_job
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, warm_start_fedavg
from pflpipe.storage.s3 import S3Store

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "specs" / "persfl-digits.yaml"
NAME = "persfl-digits"
#: The MLflow experiment of this module's runs (the session's server also holds the quickstart's).
EXPERIMENT = "persfl-digits-containers"
MODELS = ("fedavg", "fedper", "local", "persfl")
N_CLIENTS = 10
#: Stands for a credential the tasks need; it must show up nowhere.
PASSWORD = "pfl-s3cr3t-Z9q7"
AWS_SECRET = "aws-s3cr3t-K4w2"


# --- the engine and the image ---------------------------------------------------------------------

def _answers(env: dict[str, str]) -> bool:
    import docker

    try:
        with contextlib.closing(docker.DockerClient(
                base_url=env.get("DOCKER_HOST", "unix:///var/run/docker.sock"), timeout=10)) as c:
            return bool(c.ping())
    except docker.errors.DockerException:
        return False


def _no_engine(reason: str):
    message = f"no container engine: {reason} (.ci/run sets podman up: .ci/container-engine.sh)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """Yield the environment (DOCKER_HOST) under which an engine answers."""
    wait_for("done", "the container set-up")
    if _answers(dict(os.environ)):
        yield dict(os.environ)
        return
    if shutil.which("podman") is None:
        _no_engine("nothing answers at $DOCKER_HOST or Docker's socket, and podman is not "
                   "installed")
    socket_path = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0",
                                f"unix://{socket_path}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket_path}"}
    deadline = time.monotonic() + 60
    while not _answers(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        if not _answers(env):
            pytest.fail("podman system service did not answer within 60 s", pytrace=False)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DOCKER_HOST", env["DOCKER_HOST"])
            yield env
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        service.wait(timeout=30)


@pytest.fixture(scope="module")
def image(engine) -> str:
    """The CPU image of this checkout (built unless an image of its content exists)."""
    messages = []
    try:
        tag = ensure_image(log=messages.append)
    except RuntimeError as err:
        pytest.fail(f"the CPU image did not build: {err}", pytrace=False)
    print(*messages, f"image {tag}: {image_size(builder(), tag) / 1e9:.2f} GB", sep="\n")
    return tag


@pytest.fixture(scope="module")
def client(engine):
    import docker

    with contextlib.closing(docker.from_env()) as found:
        yield found


def _start(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=cwd, env={**os.environ, **env, "COLUMNS": "200"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 1200) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_a_container_that_ends_at_once_is_decided_by_its_exit_code(client, image):
    """kfp's own call reads the exit code after auto-removal (podman: 500; Docker: counted as
    success); the runner's keeps the container until its code is read."""
    codes = [run_container(client, image, ["python", "-c", f"raise SystemExit({code})"], {},
                           labels={LABEL: "exit-code-test"}) for code in (3, 0)]

    assert codes == [3, 0]
    assert client.containers.list(all=True, filters={"label": f"{LABEL}=exit-code-test"}) == []


def test_run_refuses_an_image_the_engine_does_not_hold(engine, tmp_path):
    (tmp_path / "spec.yaml").write_text(QUICKSTART.read_text())

    done = _finish(_start([str(Path(sys.executable).with_name("pflpipe")), "run", "spec.yaml",
                           "--runner", "docker", "--set",
                           "resources.image=localhost/pflpipe-test:absent"], tmp_path, {}))

    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("resources.image: image 'localhost/pflpipe-test:absent' is "
                                  "not in the container engine; build it (docker build -f "
                                  "images/Dockerfile.cpu -t localhost/pflpipe-test:absent .")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


# --- a custom model (model.path) is checked against the image before any task -------------------

#: A user's model module: importable on the host (PYTHONPATH), in no image unless one adds it.
MODEL_MODULE = """\
from torch import nn


class Net(nn.Sequential):
    head_prefixes = ("1.",)

    def __init__(self, in_shape, n_classes):
        super().__init__(nn.Flatten(), nn.Linear(64, n_classes))
"""


def _custom_model_spec(work: Path, image: str) -> Path:
    (work / "usermodels.py").write_text(MODEL_MODULE)
    spec = work / "spec.yaml"
    spec.write_text(QUICKSTART.read_text() + "model:\n  architecture: custom\n"
                    f"  path: usermodels:Net\nresources:\n  image: {image}\n")
    return spec


@pytest.mark.corpus
def test_run_refuses_a_custom_model_the_image_cannot_import_before_any_task(image, tmp_path,
                                                                            hostile):
    """Importable on the host, not in the image (its tasks keep the working directory off
    sys.path): refused with the field, the image and the fix; no MLflow run, no kfp folder."""
    _custom_model_spec(tmp_path, image)

    started = time.monotonic()
    done = _finish(_start([str(Path(sys.executable).with_name("pflpipe")), "run", "spec.yaml",
                           "--runner", "docker"], tmp_path,
                          {"PYTHONPATH": str(tmp_path), "MLFLOW_TRACKING_URI": ""}))

    hostile(done.returncode, done.stderr, time.monotonic() - started, expected=2,
            fragments=("model.path", repr(image), "resources.image", f"FROM {image}"),
            never=("Traceback", "unexpected", "on PYTHONPATH?"))
    assert done.stderr == (
        f"model.path: 'usermodels:Net' cannot be imported in image {image!r} (resources.image), "
        "where the tasks run: cannot import module 'usermodels' (No module named 'usermodels'); "
        "build an image FROM "
        f"{image} that installs the module (e.g. COPY it in and pip install it, or set "
        "PYTHONPATH to its folder), name it in resources.image, then run again "
        "(docs/images.md)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "usermodels.py"]


def test_a_custom_model_an_image_built_from_the_image_holds_passes_the_check(
        image, client, tmp_path, monkeypatch):
    """The fix docs/images.md gives: an image FROM the pflpipe image with the module in it."""
    from pflpipe.errors import SpecError
    from pflpipe.pipelines.containers import prepare

    monkeypatch.chdir(tmp_path)   # the spec's relative paths (sqlite:///mlflow.db) are here
    spec_file = _custom_model_spec(tmp_path, image)
    derived = f"{image}-usermodels"
    context = tmp_path / "context"
    context.mkdir()
    (context / "usermodels.py").write_text(MODEL_MODULE)
    (context / "Containerfile").write_text(
        f"FROM {image}\nCOPY usermodels.py /opt/models/\nENV PYTHONPATH=/opt/models\n")
    subprocess.run([builder(), "build", "--network", "host",
                    *(["--pull=never"] if builder() == "podman" else []), "-t", derived,
                    str(context)], check=True, capture_output=True)
    try:
        spec = parse_spec(spec_file.read_text())
        with pytest.raises(SpecError, match="cannot be imported in image"):
            prepare(spec, tmp_path / "results", tmp_path)
        ours = spec.model_copy(update={"resources": spec.resources.model_copy(
            update={"image": derived})})

        containers = prepare(ours, tmp_path / "results", tmp_path)

        assert list(containers.images) == [derived]
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "context", "spec.yaml", "usermodels.py"]
        token = containers.runner.container_run_args["labels"][LABEL]
        assert client.containers.list(all=True, filters={"label": f"{LABEL}={token}"}) == []
    finally:
        client.images.remove(derived, force=True)


# --- the quickstart in containers, killed, resumed, and against the subprocess runner ------------

class _AuthProxy(http.server.BaseHTTPRequestHandler):
    """Forwards to the MLflow server a request carrying the expected basic auth; else 401."""

    upstream, expected = "", ""
    denied: list[str] = []

    def _forward(self) -> None:
        if self.headers.get("Authorization") != self.expected:
            self.denied.append(self.path)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = urllib.request.Request(self.upstream + self.path, data=body or None,
                                         method=self.command)
        for key in ("Content-Type", "Accept"):
            if self.headers.get(key):
                request.add_header(key, self.headers[key])
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, headers, data = answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as err:
            status, headers, data = err.code, err.headers, err.read()
        self.send_response(status)
        self.send_header("Content-Type", headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def tracking(mlflow_server):
    """A tracking URI on 127.0.0.1 that answers only requests with the user's credentials."""
    handler = type("Proxy", (_AuthProxy,), {
        "upstream": mlflow_server, "denied": [],
        "expected": "Basic " + base64.b64encode(f"pfl:{PASSWORD}".encode()).decode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def _run_env(uri: str) -> dict[str, str]:
    return {"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_USERNAME": "pfl",
            "MLFLOW_TRACKING_PASSWORD": PASSWORD, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _progress(results: Path) -> int:
    """Rounds the warm start has checkpointed so far."""
    found = list((results / "checkpoints" / "warm_start_fedavg").glob("*/progress.json"))
    return json.loads(found[0].read_text())["rounds_completed"] if found else 0


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, image, tracking):
    """(docker work dir, subprocess work dir, killed, resumed, subprocess run).

    The subprocess run goes on beside the docker runs (each uses about one core).
    """
    uri, _ = tracking
    env = _run_env(uri)
    docker_work, sub_work = (tmp_path_factory.mktemp(name) for name in ("docker", "subprocess"))
    for work in (docker_work, sub_work):
        (work / "specs").mkdir()
        shutil.copy(QUICKSTART, work / "specs")
    pflpipe_run = [str(Path(sys.executable).with_name("pflpipe")), "run",
                   f"specs/{QUICKSTART.name}", "--set", f"tracking.experiment={EXPERIMENT}"]
    pflpipe_run += ["--set", f"resources.image={image}"]   # the same spec for both runners
    command = [*pflpipe_run, "--runner", "docker"]
    sub = _start([*pflpipe_run, "--runner", "subprocess"], sub_work, env)
    # killed (Ctrl-C) once the warm start has checkpointed a few rounds
    killed = _start(command, docker_work, env)
    deadline = time.monotonic() + 600
    while _progress(docker_work / "results" / NAME) < 3 and time.monotonic() < deadline:
        assert killed.poll() is None, killed.communicate()
        time.sleep(0.2)
    killed.send_signal(signal.SIGINT)
    killed_run = _finish(killed, timeout=120)
    resumed = _finish(_start(command, docker_work, env))
    return docker_work, sub_work, killed_run, resumed, _finish(sub)


def test_the_killed_run_stops_its_containers_and_the_next_one_resumes(quickstart, client):
    _, _, killed, resumed, _ = quickstart

    assert killed.returncode == 130, killed.stderr
    assert "interrupted; finished rounds and stages are kept on disk" in killed.stderr
    assert client.containers.list(all=True, filters={"label": LABEL}) == []
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    warm = [line for line in resumed.stdout.splitlines() if "warm_start_fedavg" in line]
    assert re.search(r"resumed from round ([3-9]|[1-3]\d)/40", warm[0]), warm


def test_every_stage_ran_in_a_container_of_the_image(quickstart, image):
    """The resumed run's stages, and those the killed run finished (cached)."""
    work, _, _, resumed, _ = quickstart
    header = resumed.stdout.splitlines()[1]
    lines = [" ".join(line.split()) for line in resumed.stdout.splitlines()
             if line.strip()[:1] in ("✓", "↺")]
    logs = sorted((work / "results" / NAME / "logs").glob("*.log"))

    assert f"kfp.local (DockerRunner, image {image} (" in header
    assert len(lines) == 8
    # what the killed run finished: partition_data, and train_local beside the warm start
    assert {line for line in lines if line.startswith("↺")} <= {
        "↺ partition_data · seed 0 cached", "↺ train_local · seed 0 cached"}
    assert [log.stem for log in logs] == [
        "collect_results_seed_0", "distill_grid_search_seed_0", "evaluate_fairness",
        "partition_data_seed_0", "personalize_fedper_seed_0", "pipeline",
        "select_teachers_seed_0", "train_local_seed_0", "warm_start_fedavg_seed_0"]
    for log in logs:
        if log.stem != "pipeline":
            assert re.search(rf"^ *container [0-9a-f]{{10,}} of image {re.escape(image)}$",
                             log.read_text(), re.MULTILINE), log


def _normal(text: str, work: Path) -> str:
    """`text` without what differs between two runs by design: the working directory, kfp's
    run folder, the MLflow and KFP run ids."""
    text = text.replace(str(work), "<work>")
    text = re.sub(rf"{NAME}-\d{{4}}(-\d\d){{5}}-\d+", "<kfp run>", text)
    # kfp.local's job id: a random integer below 10⁸, so up to 8 digits
    text = re.sub(r"(KFP run(?:</td><td>|\W{1,4}))\d{1,8}\b", r"\1<id>", text)
    return re.sub(r"\b[0-9a-f]{32}\b", "<id>", text)


def test_every_results_file_equals_the_subprocess_runs(quickstart):
    """Byte for byte, but for paths and run ids in the report, the warm start's summary and the
    sources file (the working directory, kfp's run folder, the MLflow and KFP runs)."""
    docker_work, sub_work, _, _, sub = quickstart
    assert sub.returncode == 0, sub.stdout + sub.stderr
    ours, theirs = (w / "results" / NAME / "latest" for w in (docker_work, sub_work))
    files = sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file())

    assert files == sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
    differ = [f for f in files if not filecmp.cmp(ours / f, theirs / f, shallow=False)]
    assert sorted(map(str, differ)) == ["report/report.html", "report/report.json",
                                        "report/report.md", "seed-0/fedavg/summary.md",
                                        "seed-0/sources.json"]
    for name in differ:
        assert _normal((ours / name).read_text(), docker_work) == \
            _normal((theirs / name).read_text(), sub_work), name
    # FedAvg's global model (last and best round); every client's model of the others
    assert len([f for f in files if f.suffix == ".pt"]) == 2 + (len(MODELS) - 1) * N_CLIENTS


def test_the_mlflow_runs_are_complete_and_tracked_with_the_credentials(quickstart, tracking,
                                                                       mlflow_server):
    _, _, killed, resumed, _ = quickstart
    _, proxy = tracking
    killed_id, resumed_id = (re.search(r"MLflow parent run (\w{32})", run.stdout)[1]
                             for run in (killed, resumed))
    mlflow = MlflowClient(mlflow_server)
    experiment = mlflow.get_experiment_by_name(EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], max_results=5000)
    under = {}
    for run in runs:
        under.setdefault(run.data.tags.get("mlflow.parentRunId"), []).append(run)
    parent = mlflow.get_run(resumed_id)
    algorithms = {run.info.run_name: run for run in under[resumed_id]}

    assert mlflow.get_run(killed_id).info.status == "KILLED"
    assert parent.info.status == "FINISHED"
    assert sorted(algorithms) == sorted(MODELS)
    for run in algorithms.values():   # no run per client: its clients are table rows
        assert run.info.run_id not in under and run.info.status == "FINISHED"
    assert proxy.denied == []   # every request of every task carried the credentials
    params = [value for run in runs for value in run.data.params.values()]
    assert not [value for value in params if PASSWORD in value or AWS_SECRET in value]


def test_no_credential_appears_in_any_output_log_or_file(quickstart):
    docker_work, sub_work, killed, resumed, sub = quickstart
    outputs = [run.stdout + run.stderr for run in (killed, resumed, sub)]
    files = [p for w in (docker_work, sub_work) for p in w.rglob("*") if p.is_file()]

    assert not [o for o in outputs if PASSWORD in o or AWS_SECRET in o]
    assert not [p for p in files if PASSWORD.encode() in p.read_bytes()
                or AWS_SECRET.encode() in p.read_bytes()]


def test_the_checkpoints_are_on_the_host(quickstart):
    docker_work, *_ = quickstart
    checkpoints = docker_work / "results" / NAME / "checkpoints"

    [warm] = (checkpoints / "warm_start_fedavg").iterdir()
    assert json.loads((warm / "progress.json").read_text())["rounds_completed"] == 40
    assert len(list(warm.glob("round_*.pt"))) == 41
    for round_file in (warm / "round_0040.pt", warm / "round_0000.pt"):
        torch.load(round_file, weights_only=True)


# --- a sharded stage's workers as two containers --------------------------------------------------

WORKERS_SPEC = """\
experiment: {{name: workers-containers, output_dir: {root}/out}}
dataset: {{name: digits}}
partition: {{strategy: ds3, n_clients: 8, min_samples: 10}}
federation: {{rounds: 2, batch_size: 16, lr: 0.05}}
personalization: []
tracking: {{enabled: false}}
engine: {{device: cpu, workers: 2}}
storage: {storage}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_workers_of_a_trainjob_as_two_containers_equal_the_in_process_run(
        client, image, s3_server, bucket, tmp_path):
    """What a Trainer job's two pods do, short of the cluster: each container runs the job's
    command (torchrun) with the job's environment and the PET_* variables its runtime sets,
    shares no folder with the launcher, and meets the other over gloo on 127.0.0.1."""
    local_spec = parse_spec(WORKERS_SPEC.format(root=tmp_path,
                                                storage=f"{{kind: local, path: {tmp_path}/ck}}"))
    partition_data.run(local_spec, 0, tmp_path / "partition")
    local = distributed.launch(2, warm_start_fedavg._recipe, (local_spec, 0,
                                                              tmp_path / "partition"))
    spec = parse_spec(WORKERS_SPEC.format(root=tmp_path, storage=(
        f"{{kind: s3, bucket: {bucket}, endpoint_url: '{s3_server}'}}")))
    args = (spec, 0, tmp_path / "partition")
    checkpoints = S3Store(bucket, "checkpoints/warm_start_fedavg/x", endpoint_url=s3_server)
    task = distributed.task_store(checkpoints, warm_start_fedavg._recipe, args)
    distributed.write_task(task, warm_start_fedavg._recipe, args)
    trainer = train_job(spec, "warm_start_fedavg", "workers", task.uri)["spec"]["trainer"]
    runtime = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "127.0.0.1",
               "PET_MASTER_PORT": str(_free_port())}
    credentials = {name: os.environ[name] for name in ("AWS_ACCESS_KEY_ID",
                                                       "AWS_SECRET_ACCESS_KEY")}
    pods = [client.containers.run(
        image, trainer["command"], detach=True, network_mode="host", labels={LABEL: "workers"},
        environment={e["name"]: e["value"] for e in trainer["env"]} | runtime | credentials
        | {"PET_NODE_RANK": str(rank)}) for rank in range(trainer["numNodes"])]
    try:
        codes = [pod.wait(timeout=600)["StatusCode"] for pod in pods]
        logs = [pod.logs().decode(errors="replace") for pod in pods]
    finally:
        for pod in pods:
            pod.remove(force=True)

    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert task.exists(WORKER_RESULT)
    result = distributed.read_result(task)
    assert result.rounds_completed == local.rounds_completed == 2
    for key in local.global_params:
        torch.testing.assert_close(result.global_params[key], local.global_params[key],
                                   atol=0, rtol=0)
    assert result.rows == local.rows
