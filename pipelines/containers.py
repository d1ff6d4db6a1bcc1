"""The pipeline's tasks in containers: kfp.local's DockerRunner against Docker or podman.

Each task runs in its stage's image (`resources.image`, per stage) through the Docker API the
`docker` package talks to: Docker's, or podman's (``podman system service``, with
``DOCKER_HOST=unix:///...``). What a container shares with the host, and so with the next task:

- the working directory and the results directory, each mounted at its own path, and the
  working directory is the task's: every path of the spec means what it means on the host
  (`pflpipe.sharing` refuses a spec whose tasks would touch anything else);
- the host's network (``network_mode: host``): a tracking server or S3 endpoint on 127.0.0.1
  answers as it does on the host;
- the variables of `passed_environment` (MLflow's and boto3's credentials and endpoints,
  proxies), set in each container's environment only: never a pipeline parameter, so they appear
  in no compiled pipeline, log line or MLflow param.

A container runs as the calling user (on a rootful engine), so what it writes is the user's.

kfp.local's own container call removes a container as it exits (``auto_remove``) and asks for
its exit code afterwards: podman may answer that inspect with 500 (the container is gone), and
kfp counts a container Docker reports gone (404) as a success. `run_container` stands in for it
while a run lasts: the container is kept until its exit code is read, then removed, so the exit
code alone decides a task's status.
"""

import codecs
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pflpipe.errors import PflpipeError, SpecError
from pflpipe.pipelines.platform import RESOURCE_STAGE

#: Variables a task may need from the caller's environment: by prefix, and by name.
PASSED_PREFIXES = ("MLFLOW_", "AWS_", "PFLPIPE_")
PASSED_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                "no_proxy")
#: The label every container of a run carries (its value: a token of the run).
LABEL = "io.pflpipe.run"


class EngineError(PflpipeError):
    """No container engine answers, or it refused a request."""


def passed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's variables every task container gets (credentials, endpoints, proxies)."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if name.startswith(PASSED_PREFIXES) or name in PASSED_NAMES}


def engine():
    """Return a client of the container engine `DOCKER_HOST` (or Docker's socket) names.

    Raises:
        EngineError: nothing answers there; the message says how to start Docker or podman.

    """
    import docker

    where = os.environ.get("DOCKER_HOST", "the default Docker socket")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException as err:
        raise EngineError(
            f"--runner docker: no container engine answers at {where} ({err}); start Docker, "
            "or podman's Docker API (podman system service --time=0 unix:///tmp/podman.sock &) "
            "and export DOCKER_HOST=unix:///tmp/podman.sock") from None
    return client


def stage_images(spec) -> dict[str, list[str]]:
    """Every image the pipeline of `spec` runs, with the spec field that names it."""
    from pflpipe.spec.sections import Resources

    fields: dict[str, list[str]] = {}
    stages = [name for name in Resources.model_fields if name not in ("image", "default")]
    for stage in [*stages, *RESOURCE_STAGE]:
        image = spec.resources.for_stage(RESOURCE_STAGE.get(stage, stage)).image
        own = getattr(spec.resources, stage, None)
        field = f"resources.{stage}.image" if own is not None and own.image else "resources.image"
        fields.setdefault(image, [])
        if field not in fields[image]:
            fields[image].append(field)
    return fields


def check_images(client, spec) -> dict[str, str]:
    """Return each image's id; refuse a spec whose image the engine does not hold.

    Nothing is pulled: an image that is not there is built or pulled by the user, before any
    task starts.

    Raises:
        SpecError: naming the field of each missing image and the command that builds it.

    """
    import docker

    found, missing = {}, []
    for image, fields in stage_images(spec).items():
        try:
            found[image] = client.images.get(image).id
        except docker.errors.ImageNotFound:
            dockerfile = "cuda" if "cuda" in image.rsplit(":", 1)[-1] else "cpu"
            missing.append(f"{', '.join(fields)}: image {image!r} is not in the container engine"
                           f"; build it (docker build -f images/Dockerfile.{dockerfile} -t "
                           f"{image} ., docs/images.md) or pull it, then run again")
        except docker.errors.APIError as err:
            raise EngineError(f"the container engine failed to look up image {image!r}: "
                              f"{err}") from None
    if missing:
        raise SpecError(missing)
    return found


#: Run in a stage's image by `check_custom_model`: imports the model as a task does (exit 3: no).
_IMPORT_MODEL = """\
import sys
from pflpipe.errors import SpecError
from pflpipe.models.check import resolve_custom
try:
    resolve_custom(sys.argv[1])
except SpecError as err:
    print(err)
    raise SystemExit(3)
"""


def check_custom_model(client, spec, runner) -> None:
    """Refuse a custom model (`model.path`) that a stage's image cannot import.

    One short container per image, run as the tasks run (the runner's mounts, working
    directory, user and environment): a module importable here but not in the image would
    otherwise fail the first task that builds the model.

    Raises:
        SpecError: naming `model.path`, the image and its field, what failed and the fix.
        EngineError: the engine refused to run the container.

    """
    import docker

    if spec.model.architecture != "custom":
        return
    path = spec.model.path
    run_args = dict(runner.container_run_args)
    # the results directory may not exist yet (a fresh run makes it); nothing is created here
    run_args["mounts"] = [mount for mount in run_args.get("mounts", [])
                          if Path(mount["Source"]).exists()]
    problems = []
    for image, fields in stage_images(spec).items():
        output: list[str] = []
        try:
            code = run_container(client, image, ["python3", "-c", _IMPORT_MODEL, path], {},
                                 echo=output.append, **run_args)
        except docker.errors.DockerException as err:
            raise EngineError(f"the container engine failed to run image {image!r} to check "
                              f"model.path: {err}") from None
        if code == 0:
            continue
        lines = [line.strip() for line in output[1:] if line.strip()]
        said = lines[-1] if lines else f"exit code {code}"
        if code == 3:   # resolve_custom's message less its field and its advice for the host
            said = said.removeprefix("model.path: ").removesuffix(
                "; is it installed, or on PYTHONPATH?")
        else:
            said = f"its Python failed ({said})"
        problems.append(
            f"model.path: {path!r} cannot be imported in image {image!r} ({', '.join(fields)}), "
            f"where the tasks run: {said}; build an image FROM {image} that installs the "
            "module (e.g. COPY it in and pip install it, or set PYTHONPATH to its folder), "
            f"name it in {fields[0]}, then run again (docs/images.md)")
    if problems:
        raise SpecError(problems)


@dataclass(frozen=True)
class Containers:
    """A run's DockerRunner, what it mounts and the images it runs (for the run's header)."""

    runner: object
    mounts: tuple[Path, ...]
    images: dict[str, str]     # name -> id
    engine: str                # DOCKER_HOST, or Docker's default socket

    def describe(self) -> str:
        """E.g. ``DockerRunner, image pflpipe:0.1.0-cpu (d3a165a0680b) via unix:///...``."""
        images = ", ".join(f"{name} ({image_id.split(':')[-1][:12]})"
                           for name, image_id in self.images.items())
        return f"DockerRunner, image {images} via {self.engine}"


def prepare(spec, results_dir: str | Path, cwd: Path | None = None) -> Containers:
    """Check that the tasks of `spec` can run in containers; return the runner.

    Raises:
        SpecError: a path the tasks touch lies outside what the runner mounts, an image is
            missing, or a stage's image cannot import the custom model (each line names its
            field and the fix).
        EngineError: no container engine answers.

    """
    from pflpipe.sharing import docker_sharing, unshared
    from pflpipe.tracking import resolve_tracking_uri

    cwd = Path(cwd or os.getcwd())
    sharing = docker_sharing(results_dir, cwd)
    tracking = resolve_tracking_uri(spec.tracking) if spec.tracking.enabled else None
    problems = unshared(spec, sharing, tracking, cwd)
    if problems:
        raise SpecError(problems)
    client = engine()
    images = check_images(client, spec)
    runner = docker_runner(sharing.mounts, cwd, client)
    check_custom_model(client, spec, runner)
    return Containers(runner, sharing.mounts, images,
                      os.environ.get("DOCKER_HOST", "Docker's default socket"))


def docker_runner(mounts: tuple[Path, ...], workdir: Path, client=None):
    """kfp.local's DockerRunner: `mounts` at their own paths, `workdir` the tasks' directory.

    Its containers carry the label `LABEL` with a token of their own run.
    """
    import docker
    from kfp import local

    user = {}
    rootless = client is not None and any("rootless" in option for option in
                                          client.info().get("SecurityOptions") or [])
    if hasattr(os, "getuid") and os.getuid() != 0 and not rootless:
        # a rootful engine: write as the caller; HOME must be somewhere that user may write
        user = {"user": f"{os.getuid()}:{os.getgid()}"}
    environment = passed_environment() | ({"HOME": "/tmp"} if user else {})
    return local.DockerRunner(
        mounts=[docker.types.Mount(str(path), str(path), type="bind") for path in mounts],
        working_dir=str(workdir), network_mode="host", environment=environment,
        labels={LABEL: uuid.uuid4().hex}, **user)


def run_container(client, image: str, command: list[str], volumes: dict, echo=print,
                  **run_args) -> int:
    """Run one task's container to its end; return its exit code, then remove it.

    Stands in for `kfp.local.docker_task_handler.run_docker_container`: no auto-removal (the exit
    code is read from a container that still exists), no pull, and the container is removed
    whatever happens here (an interrupted run stops it). Each line of its output goes to `echo`.
    """
    container = client.containers.run(image=image, command=command, detach=True, stdout=True,
                                       stderr=True, volumes=volumes, **run_args)
    echo(f"container {container.short_id} of image {image}")
    try:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        for chunk in container.logs(stream=True, follow=True):
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                echo(line)
        if tail := pending + decoder.decode(b"", final=True):
            echo(tail)
        return int(container.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


@contextlib.contextmanager
def containers_kept_until_exit(runner) -> Iterator[None]:
    """Run kfp.local's Docker tasks with `run_container` (restored afterwards).

    An interrupted run (Ctrl-C or SIGTERM) removes its containers at once and starts no other:
    kfp.local waits for a loop's running tasks before it lets the interruption through, and a
    task left running would go on writing into the checkpoint store the next run resumes from.
    """
    from kfp.local import docker_task_handler

    token = runner.container_run_args["labels"][LABEL]
    stopping = threading.Event()

    def run(client, image: str, command: list[str], volumes: dict, **run_args) -> int:
        if stopping.is_set():
            raise RuntimeError("the run was interrupted; no other task starts")
        return run_container(client, image, command, volumes, **run_args)

    def stop(signum, frame):
        stopping.set()
        _remove_containers(token)
        raise KeyboardInterrupt

    original = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = run
    in_main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if in_main else {}
    try:
        yield
    except BaseException:
        stopping.set()
        _remove_containers(token)
        raise
    finally:
        docker_task_handler.run_docker_container = original
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _remove_containers(token: str) -> None:
    """Stop and remove every container of the run `token`."""
    with contextlib.suppress(Exception):
        client = engine()
        for container in client.containers.list(all=True, filters={"label": f"{LABEL}={token}"}):
            with contextlib.suppress(Exception):
                container.remove(force=True)
