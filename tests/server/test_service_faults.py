"""The hostile corpus's service faults: S3, MLflow and sqlite, each a real one on 127.0.0.1.

Every case runs the real command line in-process against a fault (a socket that accepts and never
answers, moto's S3 server without the bucket, an `mlflow server`, a sqlite store locked by a
second process, a full file system, a `pflpipe run` killed with SIGKILL) and is judged by the
corpus's `hostile` fixture: a clear one-line error (exit 1 for a failed service, 2 for a bad
setting), no traceback, within 20 s, nothing computed before a service is found to fail.
"""

import base64
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from pflpipe.cli import main

pytestmark = [pytest.mark.server, pytest.mark.corpus]

PFLPIPE = str(Path(sys.executable).with_name("pflpipe"))
SPEC = """\
experiment: {{name: faults, seeds: [0], output_dir: {out}}}
dataset: {{name: gaussian, n_min: 10, n_max: 30}}
partition: {{strategy: natural, n_clients: 4, min_samples: 5}}
model: {{architecture: mlp, hidden: [4]}}
federation: {{rounds: 2, lr: 0.01}}
personalization: [{{name: fedper, rounds: 2}}]
{extra}
"""
NEVER = ("Traceback", "unexpected", "SQLAlchemy", "Logging error")


def write_spec(tmp: Path, extra: str = "", out: Path | None = None) -> Path:
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(out=out or tmp / "results", extra=extra))
    return path


def timed_main(args: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    try:
        code = main(args)
    except SystemExit as exited:
        code = exited.code
    return code, time.monotonic() - started


@pytest.fixture
def silent_port():
    """A port on 127.0.0.1 whose kernel accepts connections that nobody ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch) -> str:
    """A tracking URI of a fresh sqlite store in the test's directory (schema made)."""
    from pflpipe.tracking.mlflow_store import _READY, _client

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _client(uri).search_experiments()
    _READY.discard(uri)  # the command under test opens it as a new process would
    return uri


def test_silent_s3_endpoint_fails_in_seconds_before_any_stage(tmp_path, capsys, hostile,
                                                               silent_port, sqlite_store):
    endpoint = f"http://127.0.0.1:{silent_port}"
    spec = write_spec(tmp_path, f"storage: {{kind: s3, bucket: pfl, endpoint_url: '{endpoint}', "
                                "max_attempts: 2}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: the S3 endpoint {endpoint} does not answer (no answer within 5 s "
                       "to a request for bucket 'pfl')", "storage.endpoint_url"])
    assert not (tmp_path / "results").exists()  # found before any stage computed


def test_s3_endpoint_that_refuses_connections_fails_before_any_stage(tmp_path, capsys, hostile,
                                                                     sqlite_store):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening
        spec = write_spec(tmp_path, f"storage: {{kind: s3, bucket: pfl, endpoint_url: "
                                    f"'{endpoint}'}}")
        code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: the S3 endpoint {endpoint} cannot be reached (Could not connect "
                       "to the endpoint URL", "storage.endpoint_url"])
    assert not (tmp_path / "results").exists()  # found before any stage computed


def test_s3_without_the_bucket_fails_before_any_stage(tmp_path, capsys, hostile, s3_server,
                                                      sqlite_store):
    spec = write_spec(tmp_path, f"storage: {{kind: s3, bucket: nobucket, endpoint_url: "
                                f"'{s3_server}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: bucket 'nobucket' does not exist at {s3_server}: create it"])
    assert not (tmp_path / "results").exists()  # found before any stage computed


def test_s3_store_retries_by_botocore_and_says_how_often(silent_port):
    from pflpipe.errors import StorageError
    from pflpipe.storage.s3 import S3Store

    store = S3Store("pfl", endpoint_url=f"http://127.0.0.1:{silent_port}", max_attempts=3,
                    connect_timeout=1, read_timeout=1)
    started = time.monotonic()
    with pytest.raises(StorageError, match="failed after 3 attempts: Read timeout on endpoint"):
        store.put_bytes("round_0000.pt", b"x")
    # 3 read timeouts of 1 s plus botocore's jittered backoff (at most 1 + 2 s) between them
    assert 3 <= time.monotonic() - started < 3 + 3 + 2


@pytest.fixture
def locked_store(sqlite_store, tmp_path):
    """`sqlite_store`, with a second process holding BEGIN EXCLUSIVE on it for 60 s."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); "
         "time.sleep(60)", str(tmp_path / "mlflow.db")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    yield sqlite_store
    holder.kill()
    holder.wait(timeout=10)


def test_sqlite_store_locked_by_another_process_is_one_line_in_seconds(tmp_path, capsys, hostile,
                                                                       locked_store):
    spec = write_spec(tmp_path, f"tracking: {{uri: '{locked_store}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: the MLflow store {locked_store} is locked by another process "
                       "(waited 5 s)", "end the process that holds it"])
    assert not (tmp_path / "results").exists()  # found before any stage computed
    assert len(err.strip().splitlines()) == 1


def test_sqlite_lock_mid_run_is_one_tracking_error_naming_the_store(locked_store):
    from mlflow.exceptions import MlflowException

    from pflpipe.errors import TrackingError
    from pflpipe.tracking.mlflow_store import _guarded

    def locked(*args):
        raise MlflowException("(sqlite3.OperationalError) database is locked\n[SQL: INSERT ...]")

    with pytest.raises(TrackingError) as caught:
        _guarded("log_batch", locked_store, locked)
    assert str(caught.value) == (
        f"the MLflow store {locked_store} is locked by another process (waited 20 s); end the "
        "process that holds it (an open `sqlite3` shell, a stuck `mlflow ui` or run) or set "
        "tracking.uri to another store")


def test_unsupported_tracking_scheme_from_the_environment_is_exit_2(tmp_path, capsys, hostile,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "gopher://127.0.0.1/mlflow")
    spec = write_spec(tmp_path)

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=2, never=NEVER,
            fragments=["tracking URI 'gopher://127.0.0.1/mlflow': unsupported scheme 'gopher'; "
                       "use one of sqlite, http, https"])
    assert not (tmp_path / "results").exists()  # found before any stage computed


@pytest.mark.parametrize("store", ["directory", "text-file"])
def test_sqlite_store_that_is_a_directory_or_not_sqlite_is_exit_2_in_seconds(
        tmp_path, capsys, hostile, monkeypatch, store):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "store"
    path.mkdir() if store == "directory" else path.write_text("my notes, not a database\n")
    spec = write_spec(tmp_path, f"tracking: {{uri: 'sqlite:///{path}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    why = ("is a directory; name the database file, e.g. sqlite:///" + str(path / "mlflow.db")
           if store == "directory" else "is not an sqlite database (file is not a database); "
           "name a new file")
    hostile(code, err, seconds, expected=2, never=NEVER,
            fragments=[f"error: tracking.uri sqlite:///{path}: {path} {why}"])
    assert not (tmp_path / "results").exists()   # found before any stage computed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "store"]   # no lock file
    assert store == "directory" or path.read_text() == "my notes, not a database\n"


class _BasicAuthServer(BaseHTTPRequestHandler):
    """Answers 200 to the right basic-auth credentials, 401 otherwise; records what it got."""

    seen: list[str | None] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        header = self.headers.get("Authorization")
        type(self).seen.append(header)
        good = header == "Basic " + base64.b64encode(b"alice:s3cr3t-pw").decode()
        self.send_response(200 if good else 401)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_tracking_uri_credentials_are_sent_as_basic_auth(monkeypatch):
    from pflpipe.tracking.mlflow_store import check_server
    from pflpipe.tracking.runs import resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    server = HTTPServer(("127.0.0.1", 0), _BasicAuthServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        uri = resolve_tracking_uri(SimpleNamespace(uri=f"http://alice:s3cr3t-pw@127.0.0.1:{port}"))
        check_server(uri)
    finally:
        server.shutdown()

    assert uri == f"http://127.0.0.1:{port}"
    assert _BasicAuthServer.seen == ["Basic " + base64.b64encode(b"alice:s3cr3t-pw").decode()]
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice"


def test_tracking_uri_with_credentials_works_on_a_live_server_and_logs_none(
        tmp_path, monkeypatch, caplog, mlflow_server):
    from mlflow import MlflowClient

    from pflpipe.spec import parse_spec
    from pflpipe.tracking import open_parent_run

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    password = "pw-" + os.urandom(6).hex()
    uri = mlflow_server.replace("http://", f"http://alice:{password}@")
    spec = parse_spec(SPEC.format(out=tmp_path / "results",
                                  extra=f"tracking: {{uri: '{uri}', experiment: auth}}"))

    started = time.monotonic()
    parent = open_parent_run(spec, spec_yaml="spec: yaml")
    parent.finish("FINISHED")
    assert time.monotonic() - started < 20

    run = MlflowClient(mlflow_server).get_run(parent.run_id)
    assert run.info.status == "FINISHED"
    assert parent.pipeline_parameters()["tracking_uri"] == mlflow_server
    assert password not in repr(run.data.params) + repr(run.data.tags) + caplog.text


class _FrozenAfterHealth(BaseHTTPRequestHandler):
    """Answers the health probe, then accepts every API call and never answers it."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.startswith("/health"):
            self.send_response(200)
            self.end_headers()
            return
        time.sleep(60)

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_server_that_stops_answering_fails_by_mlflows_policy_in_bounded_time(
        tmp_path, capsys, hostile, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import mlflow  # noqa: F401 - imported before the clock starts, as in a warm process

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")  # the policy's 20 s, shortened
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FrozenAfterHealth)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    spec = write_spec(tmp_path, f"tracking: {{uri: '{uri}'}}")
    try:
        code, seconds = timed_main(["run", str(spec)])
    finally:
        server.shutdown()

    err = capsys.readouterr().err
    # 3 tries of 1 s and MLflow's backoff of 1 and 2 s (jittered) between them
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: MLflow lookup of experiment at {uri} failed: the server did not "
                       "answer in 3 tries of 1 s each"])
    assert not (tmp_path / "results").exists()  # found before any stage computed
    assert len(err.strip().splitlines()) == 1


def test_full_disk_is_one_line_naming_the_directory(tmp_path, capsys, hostile, sqlite_store):
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                             capture_output=True)
    if mounted.returncode:
        pytest.skip(f"a small tmpfs needs root (mount: {mounted.stderr.decode().strip()})")
    try:
        (full / "filler").write_bytes(b"\0" * 60_000)
        spec = write_spec(tmp_path, out=full / "results")
        code, seconds = timed_main(["run", str(spec)])
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"error: no space left on the device of {full}", "finished stages are "
                       "kept"])
    assert len(err.strip().splitlines()) == 1


def test_killing_only_the_main_process_leaves_its_run_to_the_next_one(tmp_path, sqlite_store):
    """A SIGKILLed `pflpipe run` cannot end its parent run; the next run marks it KILLED."""
    from mlflow import MlflowClient

    from pflpipe.spec import read_spec
    from pflpipe.tracking import open_parent_run

    spec_path = write_spec(tmp_path, f"tracking: {{uri: '{sqlite_store}'}}")
    first = subprocess.Popen([PFLPIPE, "run", str(spec_path)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    client = MlflowClient(sqlite_store)
    try:
        deadline = time.monotonic() + 120
        while not _parents(client) and time.monotonic() < deadline:
            time.sleep(0.3)
        [killed] = _parents(client)
        os.kill(first.pid, signal.SIGKILL)  # the main process only: its stage subprocess lives on
        first.wait(timeout=30)
        assert client.get_run(killed).info.status == "RUNNING"

        started = time.monotonic()
        second = open_parent_run(read_spec(spec_path), owner_pid=os.getpid())
        seconds = time.monotonic() - started
        second.finish("FINISHED")
    finally:
        try:
            os.killpg(first.pid, signal.SIGKILL)  # the orphaned stage, if still running
        except ProcessLookupError:
            pass

    assert client.get_run(killed).info.status == "KILLED"
    assert seconds < 20


def _parents(client) -> list[str]:
    experiment = client.get_experiment_by_name("faults")
    if experiment is None:
        return []
    return [run.info.run_id for run in client.search_runs([experiment.experiment_id],
                                                          "tags.pflpipe_pid != ''")]


def test_a_run_leaves_no_component_folders_in_the_temp_directory(tmp_path):
    from pflpipe.cli.run_verb import component_tmpdir

    with component_tmpdir() as folder:
        made = subprocess.run(["sh", "-c", "mktemp -d"], capture_output=True, text=True,
                              check=True).stdout.strip()  # what kfp.local does per task
        assert Path(made).parent == folder
        (Path(made) / "ephemeral_component.py").write_text("pass\n")

    assert not folder.exists()
    assert "TMPDIR" not in os.environ or os.environ["TMPDIR"] != str(folder)


def test_sqlite_connection_table_unaffected(sqlite_store, tmp_path):
    """The lock probe leaves the store as it was: a later client reads and writes it."""
    from pflpipe.tracking.mlflow_store import check_sqlite

    check_sqlite(sqlite_store)
    with sqlite3.connect(tmp_path / "mlflow.db") as connection:
        assert connection.execute("select count(*) from experiments").fetchone()[0] >= 1
