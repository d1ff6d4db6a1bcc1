"""``pflpipe submit`` against a stand-in KFP API server on 127.0.0.1.

A real Kubeflow cluster is out of reach of the test suite, so a small HTTP server in a thread
answers the KFP v2beta1 REST endpoints that kfp.Client 2.17 calls on submit: healthz, pipelines
(list by name, upload, upload_version, list versions), experiments (list by name, create) and
runs (create). It keeps what it is sent and refuses what the real API server refuses (a
duplicate pipeline or version name, a run without an existing pipeline version). Any other
request is answered 404 and recorded, so a test notices a call it did not expect.

kfp.Client itself is not replaced: the CLI runs in-process and talks HTTP to the server.
Tracking is off in most specs here (`tracking: {enabled: false}`). With it on, submit needs an
MLflow server (a local store is refused, tested below); for that case the same server also
answers the MLflow REST calls submit makes (health, experiment by name, create experiment, search
runs, create run, log-batch, get run), with the run's artifacts in a local folder.
"""

import email.parser
import email.policy
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import kfp
import pytest
import yaml

from pflpipe.cli import main
from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
API = "/apis/v2beta1"
NAME = "persfl-digits"
STAGE_COMPONENTS = {"comp-partition-data", "comp-warm-start-fedavg", "comp-train-local",
                    "comp-select-teachers", "comp-distill-grid-search", "comp-personalize",
                    "comp-collect-results", "comp-evaluate-fairness"}


# --- the stand-in KFP API server -----------------------------------------------------------------

@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    content_type: str

    def json(self) -> dict:
        return json.loads(self.body)

    def upload(self) -> bytes:
        """The `uploadfile` part of a multipart/form-data body."""
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {self.content_type}\r\n\r\n".encode() + self.body)
        [part] = [p for p in message.iter_parts()
                  if p.get_param("name", header="content-disposition") == "uploadfile"]
        return part.get_payload(decode=True)


@dataclass
class KfpApi:
    """What the server holds and was sent; `fail_with` makes it answer that status to all."""

    pipelines: dict[str, dict] = field(default_factory=dict)
    versions: dict[str, list[dict]] = field(default_factory=dict)
    packages: dict[str, bytes] = field(default_factory=dict)   # by version id
    experiments: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    fail_with: int | None = None
    fail_paths: str = ""     # with fail_with: only paths matching this regex fail
    stall_paths: str = ""    # requests to paths matching this regex get no answer for 30 s
    ok_to_all: bool = False  # answer every request 200 with an empty JSON object
    mlflow: "MlflowApi | None" = None

    def handle(self, req: Request) -> tuple[int, dict]:
        self.requests.append(req)
        if self.ok_to_all:
            return 200, {}
        if self.stall_paths and re.search(self.stall_paths, req.path):
            time.sleep(30)
        if self.fail_with and re.search(self.fail_paths, req.path):
            return self.fail_with, {"error": "database is unavailable", "code": 13}
        for method, pattern, handler in self.routes():
            if req.method == method and (match := re.fullmatch(pattern, req.path)):
                return handler(req, *match.groups())
        self.unexpected.append(f"{req.method} {req.path}")
        return 404, {"error": f"no route {req.method} {req.path}", "code": 5}

    def routes(self):
        return [
            ("GET", f"{API}/healthz", lambda req: (200, {"multi_user": False})),
            ("GET", f"{API}/pipelines", self.list_pipelines),
            ("POST", f"{API}/pipelines/upload", self.upload_pipeline),
            ("POST", f"{API}/pipelines/upload_version", self.upload_version),
            ("GET", f"{API}/pipelines/([^/]+)/versions", self.list_versions),
            ("GET", f"{API}/experiments", self.list_experiments),
            ("POST", f"{API}/experiments", self.create_experiment),
            ("POST", f"{API}/runs", self.create_run),
            *(self.mlflow.routes() if self.mlflow else []),
        ]

    def list_pipelines(self, req):
        found = [p for p in self.pipelines.values()
                 if _matches(req.query, p) and p["namespace"] == req.query.get("namespace", "")]
        return 200, {"pipelines": found, "total_size": len(found)} if found else {}

    def upload_pipeline(self, req):
        name, namespace = req.query["name"], req.query.get("namespace", "")
        if any(p["display_name"] == name and p["namespace"] == namespace
               for p in self.pipelines.values()):
            return 409, {"error": f"pipeline {name!r} already exists", "code": 6}
        pipeline = {"pipeline_id": _new_id(), "display_name": name, "namespace": namespace,
                    "created_at": _now()}
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        self._add_version(pipeline["pipeline_id"], name, req.upload())
        return 200, pipeline

    def upload_version(self, req):
        pipeline_id, name = req.query["pipelineid"], req.query["name"]
        if pipeline_id not in self.pipelines:
            return 404, {"error": f"pipeline {pipeline_id} not found", "code": 5}
        if any(v["display_name"] == name for v in self.versions[pipeline_id]):
            return 409, {"error": f"version {name!r} already exists", "code": 6}
        return 200, self._add_version(pipeline_id, name, req.upload())

    def _add_version(self, pipeline_id: str, name: str, package: bytes) -> dict:
        version = {"pipeline_id": pipeline_id, "pipeline_version_id": _new_id(),
                   "display_name": name, "created_at": _now()}
        self.versions.setdefault(pipeline_id, []).append(version)
        self.packages[version["pipeline_version_id"]] = package
        return version

    def list_versions(self, req, pipeline_id):
        versions = list(self.versions.get(pipeline_id, []))
        if req.query.get("sort_by") == "created_at desc":
            versions.reverse()
        versions = versions[:int(req.query.get("page_size") or len(versions) or 1)]
        return 200, {"pipeline_versions": versions, "total_size": len(versions)}

    def list_experiments(self, req):
        found = [e for e in self.experiments.values()
                 if _matches(req.query, e) and e["namespace"] == req.query.get("namespace", "")]
        return 200, {"experiments": found, "total_size": len(found)} if found else {}

    def create_experiment(self, req):
        body = req.json()
        experiment = {"experiment_id": _new_id(), "display_name": body["display_name"],
                      "namespace": body.get("namespace") or "", "created_at": _now()}
        self.experiments[experiment["experiment_id"]] = experiment
        return 200, experiment

    def create_run(self, req):
        body = req.json()
        ref = body.get("pipeline_version_reference") or {}
        versions = {v["pipeline_version_id"] for v in self.versions.get(ref.get("pipeline_id"), [])}
        if ref.get("pipeline_version_id") not in versions:
            return 400, {"error": f"no such pipeline version: {ref}", "code": 3}
        if body.get("experiment_id") not in self.experiments:
            return 400, {"error": "no such experiment", "code": 3}
        run = {**body, "run_id": _new_id(), "state": "PENDING", "created_at": _now()}
        self.runs[run["run_id"]] = run
        return 200, run


@dataclass
class MlflowApi:
    """The MLflow tracking calls of `pflpipe submit`; runs keep their tags and final status."""

    artifact_root: Path
    experiments: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)

    def routes(self):
        base = "/api/2.0/mlflow"
        return [
            ("GET", "/health", lambda req: (200, {})),
            ("POST", f"{base}/runs/search", self.search_runs),
            ("GET", f"{base}/experiments/get-by-name", self.experiment_by_name),
            ("POST", f"{base}/experiments/create", self.create_experiment),
            ("POST", f"{base}/runs/create", self.create_run),
            ("GET", f"{base}/runs/get", lambda req: (200, {"run": self._run(req.query)})),
            ("POST", f"{base}/runs/log-batch", self.log_batch),
            ("POST", f"{base}/runs/update", self.update_run),
        ]

    def experiment_by_name(self, req):
        if found := self.experiments.get(req.query["experiment_name"]):
            return 200, {"experiment": found}
        return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}

    def create_experiment(self, req):
        name = req.json()["name"]
        self.experiments[name] = {"experiment_id": str(len(self.experiments) + 1),
                                  "name": name, "lifecycle_stage": "active"}
        return 200, {"experiment_id": self.experiments[name]["experiment_id"]}

    def create_run(self, req):
        body, run_id = req.json(), uuid.uuid4().hex
        self.runs[run_id] = {"info": {
            "run_id": run_id, "run_uuid": run_id, "experiment_id": body["experiment_id"],
            "run_name": body.get("run_name"), "status": "RUNNING", "lifecycle_stage": "active",
            "start_time": body.get("start_time"),
            "artifact_uri": (self.artifact_root / run_id).as_uri()},
            "data": {"tags": [], "params": []}}
        return 200, {"run": self.runs[run_id]}

    def search_runs(self, req):
        """Runs of the experiments whose attributes and tags equal the filter's (`a = 'b' and`)."""
        body = req.json()
        clauses = re.findall(r"(attributes|tags)\.(\w+) = '([^']*)'", body.get("filter", ""))
        found = [run for run in self.runs.values()
                 if run["info"]["experiment_id"] in body["experiment_ids"]
                 and all((run["info"].get(key) if kind == "attributes" else
                          self.tags(run["info"]["run_id"]).get(key)) == value
                         for kind, key, value in clauses)]
        return 200, {"runs": found}

    def log_batch(self, req):
        body = req.json()
        run = self._run(body)
        for kind in ("tags", "params"):
            run["data"][kind] += body.get(kind, [])
        return 200, {}

    def update_run(self, req):
        body = req.json()
        self._run(body)["info"]["status"] = body["status"]
        return 200, {"run_info": self._run(body)["info"]}

    def _run(self, ids: dict) -> dict:
        return self.runs[ids.get("run_id") or ids["run_uuid"]]

    def tags(self, run_id: str) -> dict[str, str]:
        return {t["key"]: t["value"] for t in self.runs[run_id]["data"]["tags"]}


def _matches(query: dict[str, str], item: dict) -> bool:
    """Apply kfp's name filter: display_name EQUALS a string."""
    if "filter" not in query:
        return True
    [predicate] = json.loads(query["filter"])["predicates"]
    assert predicate["key"] == "display_name" and predicate["operation"] in (1, "EQUALS")
    return item["display_name"] == predicate.get("stringValue", predicate.get("string_value"))


def _new_id() -> str:
    return str(uuid.uuid4())


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Handler(BaseHTTPRequestHandler):
    api: KfpApi

    def _serve(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, payload = self.api.handle(Request(self.command, url.path, query, body,
                                                  self.headers.get("Content-Type", "")))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = _serve

    def log_message(self, format, *args):  # keep the test output clean
        pass


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-reply (kfp.Client's retries) is not a test failure: socketserver
    would print its BrokenPipeError to stderr, into whichever test of the worker runs then."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def kfp_api(monkeypatch, tmp_path):
    """A stand-in KFP API server on a free port; yields (KfpApi, host URL)."""
    # kfp.Client reads ~/.config/kfp/context.json (a namespace, cookies); keep the user's out.
    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in ("KF_PIPELINES_UI_ENDPOINT", "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID",
                "KF_PIPELINES_APP_OAUTH2_CLIENT_ID", "KF_PIPELINES_APP_OAUTH2_CLIENT_SECRET",
                "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    api = KfpApi()
    handler = type("Handler", (_Handler,), {"api": api})
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield api, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


#: A checkpoint store the pods share (a local one is refused); submit never calls it.
S3_STORAGE = "storage: {kind: s3, bucket: pfl, endpoint_url: 'http://minio.kubeflow:9000'}\n"


def quickstart(*lines: str) -> str:
    """The quickstart spec with an S3 checkpoint store, and `lines` added."""
    return (REPO / "specs" / "persfl-digits.yaml").read_text() + S3_STORAGE + "".join(lines)


@pytest.fixture
def spec_file(tmp_path):
    """The quickstart spec with tracking off and an S3 checkpoint store."""
    path = tmp_path / "spec.yaml"
    path.write_text(quickstart("tracking: {enabled: false}\n"))
    return path


def submit(spec: Path, host: str, *extra: str) -> int:
    return main(["submit", str(spec), "--host", host, *extra])


# --- tests ---------------------------------------------------------------------------------------

def test_submit_uploads_the_compiled_pipeline_and_starts_a_run(kfp_api, spec_file, tmp_path,
                                                             capsys):
    api, host = kfp_api

    code = submit(spec_file, host, "--experiment", "pfl-team")

    out, err = capsys.readouterr()
    assert code == 0, err
    assert api.unexpected == []
    [pipeline] = api.pipelines.values()
    assert pipeline["display_name"] == NAME
    [version] = api.versions[pipeline["pipeline_id"]]
    # The uploaded file is the pipeline of the spec, as `pflpipe compile` writes it.
    uploaded = yaml.safe_load(api.packages[version["pipeline_version_id"]])
    expected = yaml.safe_load(compile_pipeline(parse_spec(spec_file.read_text()),
                                               tmp_path / "expected.yaml").read_text())
    assert uploaded["pipelineInfo"]["name"] == NAME
    assert set(uploaded["components"]) >= STAGE_COMPONENTS
    assert uploaded == expected
    # The run names the uploaded version and carries the tracking parameters.
    [experiment] = api.experiments.values()
    assert experiment["display_name"] == "pfl-team"
    [run] = api.runs.values()
    assert run["pipeline_version_reference"] == {"pipeline_id": pipeline["pipeline_id"],
                                                 "pipeline_version_id":
                                                     version["pipeline_version_id"]}
    assert run["experiment_id"] == experiment["experiment_id"]
    assert run["runtime_config"]["parameters"] == {"tracking_uri": "", "experiment": NAME,
                                                   "parent_run_id": ""}
    assert run["display_name"].startswith(f"{NAME}-")
    assert f"run: {host}/#/runs/details/{run['run_id']}" in out
    assert f"new pipeline {pipeline['pipeline_id']}" in out


def test_submit_passes_the_mlflow_parent_run_to_the_pipeline(kfp_api, tmp_path, capsys):
    api, host = kfp_api
    api.mlflow = MlflowApi(tmp_path / "artifacts")
    spec = tmp_path / "spec.yaml"
    spec.write_text(quickstart(f"tracking: {{uri: '{host}', experiment: pfl-mlflow}}\n"))

    code = submit(spec, host)

    out, err = capsys.readouterr()
    assert code == 0, err
    assert api.unexpected == []
    [parent_id] = api.mlflow.runs
    [run] = api.runs.values()
    assert run["runtime_config"]["parameters"] == {
        "tracking_uri": host, "experiment": "pfl-mlflow", "parent_run_id": parent_id}
    # The parent stays open while the pipeline runs, and knows the KFP run.
    parent = api.mlflow.runs[parent_id]
    assert parent["info"]["status"] == "RUNNING"
    assert api.mlflow.tags(parent_id)["kfp_run_id"] == run["run_id"]
    assert api.mlflow.tags(parent_id)["kfp_run_url"] == f"{host}/#/runs/details/{run['run_id']}"
    assert (tmp_path / "artifacts" / parent_id / "spec.yaml").read_text() == spec.read_text()
    assert f"MLflow parent run {parent_id}" in out


def test_failed_submit_marks_the_mlflow_parent_run_failed(kfp_api, tmp_path, capsys):
    api, host = kfp_api
    api.mlflow = MlflowApi(tmp_path / "artifacts")
    api.fail_with, api.fail_paths = 500, r"^/apis/v2beta1/runs$"
    spec = tmp_path / "spec.yaml"
    spec.write_text(quickstart(f"tracking: {{uri: '{host}'}}\n"))

    code = submit(spec, host)

    assert code == 1
    assert "HTTP 500" in capsys.readouterr().err
    [parent] = api.mlflow.runs.values()
    assert parent["info"]["status"] == "FAILED"


def test_second_submit_uploads_a_new_version_of_the_same_pipeline(kfp_api, spec_file, capsys):
    api, host = kfp_api
    assert submit(spec_file, host) == 0
    capsys.readouterr()

    code = submit(spec_file, host, "--run-name", "again")

    out, err = capsys.readouterr()
    assert code == 0, err
    assert api.unexpected == []
    [pipeline] = api.pipelines.values()
    first, second = api.versions[pipeline["pipeline_id"]]
    assert first["display_name"] != second["display_name"]
    uploads = [r.path for r in api.requests if r.method == "POST" and "/upload" in r.path]
    assert uploads == [f"{API}/pipelines/upload", f"{API}/pipelines/upload_version"]
    [experiment] = api.experiments.values()   # found by name, not created twice
    assert experiment["display_name"] == NAME
    latest = [r for r in api.runs.values() if r["display_name"] == "again"]
    assert [r["pipeline_version_reference"]["pipeline_version_id"] for r in latest] == [
        second["pipeline_version_id"]]
    assert f"new version of pipeline {pipeline['pipeline_id']}" in out
    assert f"version {second['pipeline_version_id']}" in out


def test_submit_to_a_namespace_finds_its_pipeline_there(kfp_api, spec_file, capsys):
    api, host = kfp_api

    codes = [submit(spec_file, host, "--namespace", "team-a") for _ in range(2)]

    assert codes == [0, 0], capsys.readouterr().err
    [pipeline] = api.pipelines.values()
    assert pipeline["namespace"] == "team-a"
    assert len(api.versions[pipeline["pipeline_id"]]) == 2
    assert {e["namespace"] for e in api.experiments.values()} == {"team-a"}


@pytest.mark.parametrize("tracking", ['{uri: "sqlite:///mlflow.db"}', "{enabled: true}"],
                         ids=["sqlite-uri", "default-store"])
def test_submit_refuses_a_local_tracking_store(kfp_api, tmp_path, capsys, tracking):
    api, host = kfp_api
    spec = tmp_path / "spec.yaml"
    spec.write_text(quickstart(f"tracking: {tracking}\n"))

    code = submit(spec, host)

    out, err = capsys.readouterr()
    assert code == 2
    assert "sqlite:///" in err and "pods on a cluster cannot reach" in err
    assert "tracking.uri" in err and "tracking.enabled: false" in err
    assert "Traceback" not in out + err
    assert api.requests == []
    assert not (tmp_path / "mlflow.db").exists()


def test_server_answering_500_fails_with_the_host_and_no_traceback(kfp_api, spec_file, tmp_path):
    api, host = kfp_api
    api.fail_with = 500

    # A child process: under pytest the root logger has handlers, so what kfp logs while it
    # retries (a traceback per attempt) would not reach stderr as it does for a user.
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from pflpipe.cli import main; sys.exit(main())",
         "submit", str(spec_file), "--host", host],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)})  # no ~/.config/kfp/context.json

    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"error: the KFP API server at {host} failed the request")
    assert "HTTP 500" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert api.runs == {} and api.pipelines == {}


def test_failed_upload_reports_the_servers_answer(kfp_api, spec_file, capsys):
    api, host = kfp_api
    api.fail_with, api.fail_paths = 503, r"/pipelines/upload"

    code = submit(spec_file, host)

    out, err = capsys.readouterr()
    assert code == 1
    assert f"the KFP API server at {host}" in err
    assert "HTTP 503" in err and "database is unavailable" in err
    assert "Traceback" not in out + err
    assert api.runs == {}


def test_unreachable_server_fails_with_the_host(kfp_api, spec_file, capsys):
    with socket.socket() as sock:   # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"

    code = submit(spec_file, closed)

    out, err = capsys.readouterr()
    assert code == 1
    assert (f"error: the KFP API server at {closed} does not answer (connection refused: nothing "
            "listens there); check --host") in err
    assert "Traceback" not in out + err and "urllib3" not in err and "MaxRetryError" not in err


# --- the hostile corpus's submit cases: a host that is no KFP API server ------------------------

def _silent() -> Iterator[str]:
    with socket.socket() as listener:   # the kernel accepts connections; nobody answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.corpus
@pytest.mark.parametrize(("host", "code", "fragments"), [
    ("silent", 1, ["does not answer (it accepts connections but sends no answer within 5 s); "
                   "check --host"]),
    ("http://no-such-host.invalid", 1, ["error: the KFP API server at http://no-such-host.invalid "
                                        "does not answer (unknown host 'no-such-host.invalid')"]),
    ("notaurl", 2, ["argument --host: 'notaurl' is not an http(s) URL; give the KFP API endpoint "
                    "with its scheme, e.g. http://localhost:8080"]),
    ("ok-to-all", 1, ["it answered the upload of the pipeline without a pipeline_id; is it a KFP "
                      "v2 API server"]),
], ids=["silent-server", "unknown-host", "not-a-url", "200-to-everything"])
def test_submit_to_a_host_that_is_no_kfp_server_fails_in_seconds(kfp_api, spec_file, capsys,
                                                                 hostile, host, code, fragments):
    api, live = kfp_api
    api.ok_to_all = host == "ok-to-all"
    silent = _silent()
    target = {"silent": lambda: next(silent), "ok-to-all": lambda: live}.get(host, lambda: host)()

    started = time.monotonic()
    try:
        got = submit(spec_file, target)
    except SystemExit as exited:
        got = exited.code
    seconds = time.monotonic() - started

    err = capsys.readouterr().err
    hostile(got, err, seconds, expected=code, fragments=fragments,
            never=("Traceback", "unexpected", "urllib3", "MaxRetryError", "ApiValueError"))
    assert api.runs == {}


def test_a_server_that_stops_answering_after_its_health_check_times_out(kfp_api, spec_file,
                                                                        capsys, monkeypatch):
    from pflpipe.pipelines import kfp_submit as submitting

    api, host = kfp_api
    api.stall_paths = r"/pipelines/upload"   # answers its health check and lists, then is silent
    monkeypatch.setattr(submitting, "REQUEST_TIMEOUT_S", 1.0)

    started = time.monotonic()
    code = submit(spec_file, host)

    err = capsys.readouterr().err
    assert code == 1 and time.monotonic() - started < 20
    assert f"the KFP API server at {host} failed the request" in err
    assert "Read timed out" in err and "Traceback" not in err


def test_two_pipelines_of_the_spec_name_are_an_error_not_a_guess(kfp_api, spec_file, capsys):
    api, host = kfp_api
    for _ in range(2):   # e.g. uploaded by hand in the UI
        pipeline_id = _new_id()
        api.pipelines[pipeline_id] = {"pipeline_id": pipeline_id, "display_name": NAME,
                                      "namespace": "", "created_at": _now()}

    code = submit(spec_file, host)

    err = capsys.readouterr().err
    assert code == 1
    assert f"the KFP API server at {host}: 2 pipelines are called {NAME!r}" in err
    assert api.runs == {} and all(not v for v in api.versions.values())


# --- what pods cannot share ----------------------------------------------------------------------

def test_submit_refuses_the_default_local_checkpoint_store(kfp_api, tmp_path, capsys):
    """The quickstart as it is: its checkpoints would go to each pod's own disk."""
    api, host = kfp_api
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "specs" / "persfl-digits.yaml").read_text()
                    + "tracking: {enabled: false}\n")

    code = submit(spec, host)

    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith(f"{spec}: storage.kind: a local checkpoint store (results/{NAME}) is "
                          "each pod's own disk"), err
    assert "use an S3 store (storage: {kind: s3" in err
    assert "Traceback" not in out + err
    assert api.requests == []


@pytest.mark.parametrize(("root", "refused"), [("data", True), ("/datasets/shared", False)],
                         ids=["relative", "absolute"])
def test_submit_refuses_a_relative_dataset_root_it_reads(kfp_api, spec_file, capsys, root,
                                                          refused):
    """A pod resolves a relative root in its own empty working directory; an absolute one may
    be in the image or a volume."""
    api, host = kfp_api

    code = submit(spec_file, host, "--set", f"dataset={{name: arrays, path: d.npz, root: {root}}}")

    err = capsys.readouterr().err
    if refused:
        assert code == 2
        assert err.startswith(f"{spec_file}: dataset.root: 'data' is relative to a pod's own "
                              "empty working directory; give dataset.source"), err
        assert api.requests == []
    else:
        assert code == 0, err
        assert api.runs


def _spec_values(node) -> list[dict]:
    """Every spec (JSON text holding an `experiment` section) among a compiled pipeline's values."""
    if isinstance(node, dict):
        return [found for value in node.values() for found in _spec_values(value)]
    if isinstance(node, list):
        return [found for value in node for found in _spec_values(value)]
    if isinstance(node, str) and node.startswith('{"experiment"'):
        return [json.loads(node)]
    return []


def test_submit_takes_set_as_run_does(kfp_api, tmp_path, capsys):
    """--set makes the quickstart's local store an S3 one, and changes a setting."""
    api, host = kfp_api
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "specs" / "persfl-digits.yaml").read_text()
                    + "tracking: {enabled: false}\n")

    code = submit(spec, host, "--set", "storage={kind: s3, bucket: pfl}",
                  "--set", "federation.rounds=7")

    assert code == 0, capsys.readouterr().err
    [package] = api.packages.values()
    specs = _spec_values(yaml.safe_load(package))
    assert len(specs) > 3
    rounds = {s["federation"]["rounds"] for s in specs if "federation" in s}
    assert 7 in rounds and 40 not in rounds   # the quickstart's 40; a stage's scope keeps 20
    assert "s3" in {s["storage"]["kind"] for s in specs if "storage" in s}
