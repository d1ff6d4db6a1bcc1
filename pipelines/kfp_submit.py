"""Upload a spec's pipeline to a KFP API server and start a run (`kfp.Client`).

The pipeline is named after the spec's experiment. The first submit uploads it; every later one
uploads a new version of it. The run always names the exact version it runs: kfp.Client 2.x
refuses a run from a pipeline id alone (kubeflow/pipelines#11441).
"""

import contextlib
import io
import json
import logging
import secrets
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pflpipe.errors import PflpipeError
from pflpipe.layout import compiled_pipeline
from pflpipe.pipelines.compiler import compile_pipeline

#: Seconds between kfp.Client's health checks of the API server (kfp waits 5 s, five times).
HEALTHZ_PAUSE_S = 1.0
#: Seconds the API server has to accept a connection and to answer the first request (the probe),
#: and to answer each later one (kfp.Client itself waits for ever).
PROBE_TIMEOUT_S, REQUEST_TIMEOUT_S = 5.0, 60.0
#: The KFP v2 API's health endpoint (below --host).
HEALTHZ = "/apis/v2beta1/healthz"


class SubmitError(PflpipeError):
    """The KFP API server refused a request or could not be reached."""


@dataclass(frozen=True)
class Submitted:
    """The uploaded pipeline version and the started run."""

    pipeline_id: str
    version_id: str
    is_new_pipeline: bool       # True: this submit created the pipeline (its first version)
    experiment_id: str
    run_id: str
    url: str


def submit(spec, *, host: str, experiment: str, arguments: dict[str, str],
           namespace: str | None = None, run_name: str | None = None) -> Submitted:
    """Compile, upload (a new pipeline, or a new version of the spec's pipeline) and run.

    The pipeline is named after `experiment.name`; `experiment` is the KFP experiment.

    Raises:
        SubmitError: the server could not be reached or refused a request; the message names
            the host and the server's answer.

    """
    name = spec.experiment.name
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    check_server(host)
    with tempfile.TemporaryDirectory() as tmp, _quiet() as kfp_log:
        path = compile_pipeline(spec, Path(tmp) / compiled_pipeline(name))
        try:
            client = _client(host, namespace)
            pipeline_id = _pipeline_id(client, name, namespace)
            is_new = pipeline_id is None
            if is_new:
                pipeline_id = _id(client.upload_pipeline(str(path), pipeline_name=name,
                                                         namespace=namespace),
                                  "pipeline_id", "the upload of the pipeline")
                version_id = _only_version(client, pipeline_id)
            else:
                # Version names are unique per pipeline: two submits in one second must differ.
                version_id = _id(client.upload_pipeline_version(
                    str(path), pipeline_version_name=f"{name}-{stamp}-{secrets.token_hex(3)}",
                    pipeline_id=pipeline_id), "pipeline_version_id", "the upload of a version")
            exp = client.create_experiment(experiment, namespace=namespace)
            _id(exp, "experiment_id", f"the experiment {experiment!r}")
            run = client.run_pipeline(exp.experiment_id, run_name or f"{name}-{stamp}",
                                      pipeline_id=pipeline_id, version_id=version_id,
                                      params=arguments)
            _id(run, "run_id", "the new run")
        except SubmitError as err:
            raise SubmitError(f"the KFP API server at {host}: {err}") from err
        except Exception as err:  # noqa: BLE001 - kfp_server_api, urllib3 and ValueError alike
            raise SubmitError(f"the KFP API server at {host} failed the request: "
                              f"{_reason(err, kfp_log)}") from err
    url = f"{host.rstrip('/')}/#/runs/details/{run.run_id}"
    return Submitted(pipeline_id, version_id, is_new, exp.experiment_id, run.run_id, url)


def check_server(host: str) -> None:
    """Raise SubmitError unless a KFP API answers JSON at `host` within `PROBE_TIMEOUT_S`.

    A refused connection, an unknown host and a silent server fail here in seconds; an HTTP
    error (401, 500, ...) is left for kfp.Client to report with the server's answer.
    """
    import socket
    import urllib.error
    import urllib.parse
    import urllib.request

    url = host.rstrip("/") + HEALTHZ
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as answer:
            body = answer.read(4096)
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            why = f"it accepts connections but sends no answer within {PROBE_TIMEOUT_S:g} s"
        elif isinstance(reason, socket.gaierror):
            why = f"unknown host {urllib.parse.urlsplit(host).hostname!r}"
        elif isinstance(reason, ConnectionRefusedError):
            why = "connection refused: nothing listens there"
        else:
            why = str(reason)
        raise SubmitError(f"the KFP API server at {host} does not answer ({why}); check --host, "
                          "and that the server or its port-forward (kubectl port-forward -n "
                          "kubeflow svc/ml-pipeline-ui 8080:80) is up") from None
    try:
        json.loads(body)
    except ValueError:
        shown = body[:60].decode("utf-8", "replace").strip()
        raise SubmitError(f"{host} is not a KFP API server: GET {HEALTHZ} answered {shown!r}, "
                          "not JSON; point --host at the KFP API endpoint (e.g. the "
                          "ml-pipeline-ui service)") from None


def _id(answer, field: str, what: str) -> str:
    """`answer`'s `field`; a server that answers without it is not a KFP API server."""
    value = getattr(answer, field, None)
    if not value:
        raise SubmitError(f"it answered {what} without a {field}; is it a KFP v2 API server "
                          "(kfp.Client 2.x needs the v2beta1 API)?")
    return value


def _client(host: str, namespace: str | None):
    import kfp

    class Client(kfp.Client):
        """kfp.Client, failing sooner when the server's health check fails."""

        def get_kfp_healthz(self, sleep_duration: float = HEALTHZ_PAUSE_S):
            return super().get_kfp_healthz(sleep_duration=sleep_duration)

    client = Client(host=host, namespace=namespace or "kubeflow")
    # kfp.Client passes no timeout: a server that stops answering would hold submit for ever
    rest = client._healthz_api.api_client.rest_client
    request = rest.request
    rest.request = lambda *args, _request_timeout=None, **kwargs: request(
        *args, _request_timeout=_request_timeout or (PROBE_TIMEOUT_S, REQUEST_TIMEOUT_S),
        **kwargs)
    return client


def _pipeline_id(client, name: str, namespace: str | None) -> str | None:
    """Return the id of the pipeline called `name` (in `namespace`), or None.

    `kfp.Client.get_pipeline_id` looks only at shared pipelines, so on a multi-user cluster it
    would miss the pipeline an earlier submit uploaded to the namespace.
    """
    query = json.dumps({"predicates": [
        {"operation": "EQUALS", "key": "display_name", "stringValue": name}]})
    found = client.list_pipelines(filter=query, namespace=namespace).pipelines or []
    if len(found) > 1:
        raise SubmitError(f"{len(found)} pipelines are called {name!r}; delete all but one "
                          "(or rename experiment.name)")
    return found[0].pipeline_id if found else None


def _only_version(client, pipeline_id: str) -> str:
    """Return the version id of a pipeline that was just uploaded (it has one version)."""
    versions = client.list_pipeline_versions(pipeline_id, page_size=1,
                                             sort_by="created_at desc").pipeline_versions
    if not versions:
        raise SubmitError(f"pipeline {pipeline_id} was uploaded but the server lists no version "
                          "of it")
    return _id(versions[0], "pipeline_version_id", "the list of the pipeline's versions")


class _KfpLog(logging.Filter):
    """Keep what kfp logs on the root logger (its retries log a traceback each) off the screen."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _quiet() -> Iterator[_KfpLog]:
    """Silence kfp.Client; `submit` reports once, in one line.

    kfp.Client prints a link per call, warns about its server version and logs each failed
    health check with a traceback on the root logger. A filter on the root logger sees only
    records logged on the root logger itself (kfp's ``logging.exception``), not those of named
    loggers such as pflpipe's.
    """
    kfp_log = _KfpLog()
    root = logging.getLogger()
    root.addFilter(kfp_log)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield kfp_log
    finally:
        root.removeFilter(kfp_log)


def _reason(err: Exception, kfp_log: _KfpLog | None = None) -> str:
    """Say what went wrong in one line: the HTTP status and body, or the error itself."""
    status, reason = getattr(err, "status", None), getattr(err, "reason", None)
    body = getattr(err, "body", None)
    if status:
        detail = f": {body.strip()[:300]}" if isinstance(body, str) and body.strip() else ""
        return f"HTTP {status} {reason or ''}".rstrip() + detail
    text = f"{err.__class__.__name__}: {err}"
    # kfp's health check gives up with a bare TimeoutError; the answers it got are in its log.
    logged = [r.exc_info[1] for r in kfp_log.records if r.exc_info] if kfp_log else []
    if logged:
        text += f" (last answer: {_reason(logged[-1])})"
    return text
