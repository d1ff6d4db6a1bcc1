"""Real servers on 127.0.0.1 for the server tests: an `mlflow server` (sqlite backend, proxied
artifacts) and moto's standalone S3 server, each a subprocess on a free port.

Fixtures:
- ``mlflow_server`` (session): the tracking URI, e.g. ``http://127.0.0.1:53412``.
- ``s3_server`` (session): the S3 endpoint URL.
- ``s3_process`` (per test): a moto server of the test's own, as a `ServerProcess` the test may
  stop, pause (SIGSTOP), resume and restart on the same port.
- ``moto_factory`` (per test): builds further moto servers (e.g. with extra environment); each is
  stopped at teardown.
- ``make_bucket``: creates a bucket on any endpoint; ``bucket``: a fresh one on ``s3_server``.
- ``aws_env`` (autouse): dummy credentials and region; no shared config or instance metadata.
- ``browser`` (per module): Debian's headless Chromium through chromedriver.

A server that does not become ready fails the test with the tail of its log; nothing is skipped.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from ci_prep import wait_for

READY_TIMEOUT_S = 120  # a loaded 2-core machine starts mlflow server in 10-30 s
STOP_GRACE_S = 3  # uvicorn waits for idle keep-alive clients; tests need no graceful stop


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A server subprocess in its own process group, ready once `health_path` answers 200."""

    def __init__(self, name: str, argv: list[str], url: str, health_path: str, log_path: Path,
                 cwd: Path, env: dict[str, str] | None = None):
        self.name, self.argv, self.url, self.health_path = name, argv, url, health_path
        self.log_path, self.cwd, self.env = log_path, cwd, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ServerProcess":
        """Start the process and wait until it answers; fail with its log otherwise."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child process owns it
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"exited with code {self.proc.returncode}")
            if self.ready():
                return self
            time.sleep(0.25)
        self.stop()
        self._fail(f"was not ready within {READY_TIMEOUT_S} s")
        raise AssertionError("unreachable")

    def ready(self) -> bool:
        """Whether the health endpoint answers 200."""
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def _fail(self, what: str) -> None:
        tail = self.log_path.read_text(errors="replace")[-4000:]
        pytest.fail(f"{self.name} ({' '.join(self.argv)}) {what}; its log:\n{tail}",
                    pytrace=False)

    def _signal_group(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signum)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections are accepted but never answered."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        """Unfreeze a paused server."""
        self._signal_group(signal.SIGCONT)

    def stop(self) -> None:
        """Terminate the server's process group (SIGKILL after a short grace period)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.resume()
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(timeout=10)
        try:  # children the server forked (uvicorn workers, mlflow's job runner)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_mlflow_server(root: Path) -> ServerProcess:
    """Start `mlflow server` with a sqlite backend and proxied artifacts under `root`."""
    port = free_port()
    argv = [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", str(root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    server = ServerProcess("mlflow server", argv, f"http://127.0.0.1:{port}", "/health",
                           root / "mlflow-server.log", root, env)
    return server.start()


def moto_server(root: Path, port: int | None = None) -> ServerProcess:
    """Return (not started) a moto S3 server on 127.0.0.1."""
    port = port or free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return ServerProcess("moto server", argv, f"http://127.0.0.1:{port}", "/moto-api/",
                         root / f"moto-{port}.log", root, env)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """Yield the URI of an `mlflow server` (sqlite backend) running for the whole session."""
    server = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """Yield the endpoint URL of a moto S3 server running for the whole session."""
    server = moto_server(tmp_path_factory.mktemp("s3-server")).start()
    yield server.url
    server.stop()


@pytest.fixture
def s3_process(tmp_path):
    """Yield a moto S3 server of this test's own, which the test may stop and restart."""
    server = moto_server(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Dummy AWS credentials and region; no shared config files or instance metadata."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture
def moto_factory(tmp_path):
    """Return a function that builds (not starts) moto servers; all are stopped at teardown."""
    servers = []

    def build(extra_env: dict[str, str] | None = None) -> ServerProcess:
        server = moto_server(tmp_path)
        server.env = {**server.env, **(extra_env or {})}
        servers.append(server)
        return server

    yield build
    for server in servers:
        server.stop()


def create_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket (a fresh name unless given) on the S3 server; return its name."""
    import boto3

    name = name or f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint_url).create_bucket(Bucket=name)
    return name


@pytest.fixture
def make_bucket():
    """Return `create_bucket(endpoint_url, name=None) -> name`."""
    return create_bucket


@pytest.fixture
def bucket(s3_server) -> str:
    """A fresh, empty bucket on the session's S3 server."""
    return create_bucket(s3_server)


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=2400,1400")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's headless Chromium through chromedriver, with a fresh profile."""
    wait_for("browser", "the Chromium install")
    if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
        message = ("Debian's chromium and chromium-driver are not installed (apt-get install "
                   "chromium chromium-driver; .ci/run installs them)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()
