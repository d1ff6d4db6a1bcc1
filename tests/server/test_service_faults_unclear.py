"""Service faults whose message used to be a library's raw text (issue 46): each is now one line
naming the service and the fix, exit 1, before any stage computes. Every server is a real one on
127.0.0.1 (a plain-HTTP server where https is named, a server that stalls mid-reply, a web server
that is not S3) or a real read-only file system (tmpfs remounted read-only)."""

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_service_faults import NEVER, timed_main, write_spec

pytestmark = [pytest.mark.server, pytest.mark.corpus]


class _Plain(BaseHTTPRequestHandler):
    """A plain-HTTP server: 200 to every GET; no handler for HEAD or PUT (501, as web servers)."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


class _StallsMidReply(_Plain):
    """Answers the health probe, then begins every API reply and never finishes it."""

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/health"):
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b'{"experiment": ')
        self.wfile.flush()
        time.sleep(30)

    do_POST = do_GET


@pytest.fixture
def serve():
    servers = []

    def start(handler) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def test_https_at_a_plain_http_server_says_so(tmp_path, capsys, hostile, monkeypatch, serve):
    monkeypatch.chdir(tmp_path)
    host = serve(_Plain)
    spec = write_spec(tmp_path, f"tracking: {{uri: 'https://{host}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=(*NEVER, "did not answer"),
            fragments=[f"the MLflow tracking server at https://{host} answers plain HTTP, not "
                       f"HTTPS", f"write http://{host} in tracking.uri"])
    assert not (tmp_path / "results").exists()


def test_a_server_that_stalls_mid_reply_is_named_without_raw_text(tmp_path, capsys, hostile,
                                                                  monkeypatch, serve):
    monkeypatch.chdir(tmp_path)
    import mlflow  # noqa: F401 - imported before the clock starts, as in a warm process

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")   # the policy's 20 s, shortened
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    host = serve(_StallsMidReply)
    spec = write_spec(tmp_path, f"tracking: {{uri: 'http://{host}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=(*NEVER, "HTTPConnectionPool", "Read timed"),
            fragments=[f"MLflow lookup of experiment at http://{host} failed: the server accepted "
                       "the request but sent no complete reply within 1 s"])
    assert not (tmp_path / "results").exists()
    assert len(err.strip().splitlines()) == 1


def test_an_s3_endpoint_that_is_not_s3_says_so(tmp_path, capsys, hostile, monkeypatch, serve):
    monkeypatch.chdir(tmp_path)
    host = serve(_Plain)
    spec = write_spec(tmp_path, "tracking: {enabled: false}\nstorage: {kind: s3, bucket: "
                                f"faults, endpoint_url: 'http://{host}'}}")

    code, seconds = timed_main(["run", str(spec)])

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=(*NEVER, "Not Implemented"),
            fragments=[f"the endpoint http://{host} is not an S3 server: it answered HTTP 501",
                       "point storage.endpoint_url at the S3 API"])
    assert not (tmp_path / "results").exists()


def test_an_mlflow_db_on_a_read_only_file_system_names_the_folder(tmp_path, capsys, hostile,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode:
        pytest.skip(f"a tmpfs needs root (mount: {mounted.stderr.decode().strip()})")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    try:
        subprocess.run([sys.executable, "-c", "from pflpipe.tracking.mlflow_store import _client; "
                        f"_client({uri!r}).search_experiments()"], check=True)  # a store made
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        spec = write_spec(tmp_path, f"tracking: {{uri: '{uri}'}}")
        code, seconds = timed_main(["run", str(spec)])
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)

    err = capsys.readouterr().err
    hostile(code, err, seconds, expected=1, never=NEVER,
            fragments=[f"the MLflow store {uri} cannot be written: its folder {folder} is "
                       "read-only", "make the folder writable"])
    assert not (tmp_path / "results").exists()
