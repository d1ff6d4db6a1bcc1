"""The MLflow tracker: a parent run per pipeline run, child runs per stage, algorithm and client.

Built on ``mlflow.MlflowClient`` with explicit run ids (no fluent global state, so the
``MLFLOW_RUN_ID`` variable that KFP's MLflow plugin injects cannot hijack a run). mlflow is imported
inside functions only, so ``import pflpipe.tracking`` stays light.

The entry points that create these trackers live in `pflpipe.tracking.runs`; a stage only sees
the `Tracker` interface: ``tracker.child("client-3", {"client_id": "3"})`` per client,
``log_history`` for per-round metrics, ``log_model`` for models.
"""

import json
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pflpipe.errors import TrackingError
from pflpipe.tracking.base import Tracker
from pflpipe.tracking.scrub import find_secret, scrub_mapping, scrub_text

log = logging.getLogger(__name__)
T = TypeVar("T")

PARENT_TAG = "mlflow.parentRunId"
ROOT_TAG = "root_run_id"
_MAX_PARAMS_TAGS, _MAX_METRICS, _MAX_PARAM_LEN, _MAX_TAG_LEN = 100, 1000, 6000, 8000

#: The one retry policy of MLflow calls, MLflow's own; pflpipe has no retry loop of its own.
#: - On a tracking server, MLflow's REST client retries (urllib3) a refused connection, a timeout
#:   and HTTP 429/5xx; these defaults of its environment variables (the user's values win) bound
#:   a call to (MAX_RETRIES + 1) × TIMEOUT plus a few seconds of backoff (1, 2 s), about a minute,
#:   instead of MLflow's 7 retries × 120 s. The first request of a process is `check_server`'s,
#:   which gives up after PROBE_TIMEOUT_S.
#: - On a sqlite store, a call waits for a lock held by another process by sqlite's own busy
#:   timeout (MLflow sets 20 s per session), then fails; the first open of a process is
#:   `check_sqlite`'s, which gives up after PROBE_TIMEOUT_S.
#: Every failure then becomes one TrackingError naming the store.
HTTP_POLICY = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "20", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
#: Seconds of MLflow's sqlite busy timeout (`mlflow.store.db.utils`), for messages.
SQLITE_BUSY_S = 20


_READY: set[str] = set()  # stores this process has opened: sqlite schema made, server answered
#: Seconds a tracking server has to answer its first request; MLflow's own retries would wait
#: minutes on a server that is down.
PROBE_TIMEOUT_S = 5.0


def move_credentials(tracking_uri: str) -> str:
    """Return `tracking_uri` without ``user:password@``, which go to MLflow's own variables.

    MLflow sends MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD as HTTP basic auth; a URI
    that carries them would hand the userinfo to the HTTP client as part of the host, and would
    show them wherever the URI is printed (the pipeline's parameters). Child processes inherit
    the variables.

    >>> import os
    >>> move_credentials("http://alice:pw@127.0.0.1:5000/"), os.environ["MLFLOW_TRACKING_USERNAME"]
    ('http://127.0.0.1:5000/', 'alice')
    """
    import os
    import urllib.parse

    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return tracking_uri
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    os.environ["MLFLOW_TRACKING_USERNAME"] = urllib.parse.unquote(user)
    if password:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = urllib.parse.unquote(password)
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def check_server(tracking_uri: str) -> None:
    """Raise TrackingError when nothing answers HTTP at `tracking_uri` within `PROBE_TIMEOUT_S`.

    Any HTTP answer (even 401 or 404) and a TLS failure (MLflow has settings for certificates)
    count as alive; a refused or unanswered connection and an unknown host do not. The request
    carries MLflow's basic-auth credentials when they are set.
    """
    import base64
    import os
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(tracking_uri.rstrip("/") + "/health")
    if user := os.environ.get("MLFLOW_TRACKING_USERNAME"):
        token = f"{user}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, ssl.SSLError):
            return
        if isinstance(reason, TimeoutError):
            reason = f"no answer within {PROBE_TIMEOUT_S:g} s"
        raise TrackingError(
            f"the MLflow tracking server at {scrub_text(tracking_uri)} does not answer "
            f"({reason}); start it, point tracking.uri (or MLFLOW_TRACKING_URI) at a running "
            "server, or set tracking.enabled: false") from None


def check_sqlite(tracking_uri: str) -> None:
    """Raise TrackingError when another process holds the sqlite store's write lock.

    Waits `PROBE_TIMEOUT_S` for it (``BEGIN IMMEDIATE``, rolled back at once); a database not
    made yet passes (MLflow creates it).
    """
    import sqlite3

    database = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    if not database.is_file():
        return
    try:
        connection = sqlite3.connect(database, timeout=PROBE_TIMEOUT_S, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except sqlite3.OperationalError as err:
        if "locked" not in str(err) and "busy" not in str(err):
            raise TrackingError(f"the MLflow store {tracking_uri} cannot be opened ({err})"
                                ) from None
        raise TrackingError(_locked(tracking_uri, PROBE_TIMEOUT_S)) from None


def _locked(tracking_uri: str, seconds: float) -> str:
    return (f"the MLflow store {tracking_uri} is locked by another process (waited "
            f"{seconds:g} s); end the process that holds it (an open `sqlite3` shell, a stuck "
            "`mlflow ui` or run) or set tracking.uri to another store")


def _client(tracking_uri: str):
    """Return a client; the first one of a process on a sqlite store holds a lock beside it.

    MLflow creates and migrates a sqlite schema when a client first opens the database; two
    processes doing that at once fail ("duplicate column name: step"). The lock makes them take
    turns: the first creates the tables, the others find them. The first client of a process
    on a store probes it (`check_server`, `check_sqlite`) and sets `HTTP_POLICY`.
    """
    import os

    from mlflow import MlflowClient

    # MLflow prints (and fetches) a "View run" link at the end of every run on a server; we
    # end hundreds of client runs and print one link of our own.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name, value in HTTP_POLICY.items():
        os.environ.setdefault(name, value)
    # The store logs each SQLAlchemy error with its traceback before raising it; the raise
    # becomes one TrackingError line (`_guarded`).
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    tracking_uri = move_credentials(tracking_uri)
    if tracking_uri.startswith(("http://", "https://")) and tracking_uri not in _READY:
        check_server(tracking_uri)
        _READY.add(tracking_uri)
    if not tracking_uri.startswith("sqlite:///") or tracking_uri in _READY:
        return MlflowClient(tracking_uri=tracking_uri)
    from filelock import FileLock

    check_sqlite(tracking_uri)
    _sqlite_write_ahead_log()
    database = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    with FileLock(f"{database}.lock"):
        client = MlflowClient(tracking_uri=tracking_uri)
    _READY.add(tracking_uri)
    return client


def _sqlite_write_ahead_log() -> None:
    """Open every sqlite connection of this process in WAL mode with synchronous=NORMAL.

    MLflow's store commits after every call (a run, a batch of metrics, a logged model), and in
    sqlite's default mode each commit waits for the disk twice; with a write-ahead log a commit
    only appends to it, and readers (``mlflow ui``) no longer block the writer. WAL is recorded
    in the database file, so every later client finds it. NORMAL still keeps the database
    consistent on a crash; what a power cut can lose is the last commits before it.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _write_ahead_log):
        event.listen(Engine, "connect", _write_ahead_log)


def _write_ahead_log(connection, _record) -> None:
    import sqlite3

    if not isinstance(connection, sqlite3.Connection):
        return
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:  # another process holds the database: keep its mode
        log.debug("sqlite journal mode left as it is", exc_info=True)
    connection.execute("PRAGMA synchronous=NORMAL")


def _guarded(what: str, tracking_uri: str, fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` (MLflow retries by `HTTP_POLICY`); turn its failure into one TrackingError line."""
    from mlflow.exceptions import MlflowException

    try:
        return fn(*args, **kwargs)
    except MlflowException as err:
        if "database is locked" in str(err):
            raise TrackingError(_locked(tracking_uri, SQLITE_BUSY_S)) from err
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "Max retries exceeded" in first:
            first = _no_answer()
        raise TrackingError(f"MLflow {what} at {scrub_text(tracking_uri)} failed: "
                            f"{scrub_text(first)}") from err


def _no_answer() -> str:
    """Why a server call failed after MLflow's retries, in `HTTP_POLICY`'s terms."""
    import os

    tries = 1 + int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", 7))
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", 120)
    return (f"the server did not answer in {tries} tries of {timeout} s each "
            "(MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT); check that it is "
            "up, or set tracking.enabled: false")


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _number(key: str, value: Any, step: int | None) -> float:
    if isinstance(value, str | bytes):
        raise TypeError(f"metric {key!r} (step {step}) must be a number, got {value!r}; put "
                        "labels such as the split or client in the metric name or in tags")
    return float(value)


class MlflowTracker(Tracker):
    """One MLflow run. `child` opens nested runs that inherit this run's context tags."""

    def __init__(self, client, run_id: str, experiment_id: str, *, tracking_uri: str,
                 log_models: bool = True, context_tags: dict[str, str] | None = None):
        self.client, self.run_id, self.experiment_id = client, run_id, experiment_id
        self.tracking_uri, self.log_models = tracking_uri, log_models
        self.context_tags = dict(context_tags or {})

    @classmethod
    def attach(cls, tracking_uri: str, run_id: str, *, experiment: str | None = None,
               log_models: bool = True) -> "MlflowTracker":
        """Return a tracker for an existing run (e.g. the pipeline's parent run)."""
        client = _client(tracking_uri)
        run = _guarded("lookup of run", tracking_uri, client.get_run, run_id)
        if run.info.lifecycle_stage == "deleted":
            raise TrackingError(f"run {run_id} at {scrub_text(tracking_uri)} is deleted; "
                                "restore it in the MLflow UI or start the pipeline again")
        if experiment:
            found = _guarded("lookup of experiment", tracking_uri, client.get_experiment,
                              run.info.experiment_id).name
            if found != experiment:
                raise TrackingError(f"run {run_id} belongs to experiment {found!r}, not "
                                    f"{experiment!r}; pass the experiment the CLI opened")
        return cls(client, run_id, run.info.experiment_id, tracking_uri=tracking_uri,
                   log_models=log_models, context_tags={ROOT_TAG: run_id})

    def _call(self, what: str, fn: Callable[..., T], *args, **kwargs) -> T:
        return _guarded(f"{what} (run {self.run_id})", self.tracking_uri, fn, *args, **kwargs)

    @contextmanager
    def child(self, name: str, tags: dict[str, str] | None = None) -> Iterator["MlflowTracker"]:
        """Open a nested run; FINISHED on exit, FAILED (re-raised) on an exception."""
        context = {**self.context_tags, **{k: str(v) for k, v in (tags or {}).items()}}
        run_tags = {**scrub_mapping(context, "tag"), PARENT_TAG: self.run_id}
        run = self._call("creation of child run", self.client.create_run, self.experiment_id,
                         tags=run_tags, run_name=scrub_text(name))
        child = MlflowTracker(self.client, run.info.run_id, self.experiment_id,
                              tracking_uri=self.tracking_uri, log_models=self.log_models,
                              context_tags=context)
        try:
            yield child
        except BaseException as err:
            status = "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED"
            try:
                child.terminate(status)
            except TrackingError as err:
                log.warning("could not mark run %s as %s: %s", child.run_id, status, err)
            raise
        child.terminate("FINISHED")

    def terminate(self, status: str = "FINISHED") -> None:
        """End this run with `status` (FINISHED, FAILED or KILLED)."""
        self._call("end of run", self.client.set_terminated, self.run_id, status)

    def log_params(self, params: dict[str, Any]) -> None:
        """Record parameters (values stringified, credentials redacted, long values cut)."""
        from mlflow.entities import Param

        clean = scrub_mapping(params, "parameter")
        entries = [Param(k, v if len(v) <= _MAX_PARAM_LEN else v[:_MAX_PARAM_LEN - 3] + "...")
                   for k, v in clean.items()]
        for chunk in _chunks(entries, _MAX_PARAMS_TAGS):
            self._call("log_params", self.client.log_batch, self.run_id, params=chunk)

    def set_tags(self, tags: dict[str, str]) -> None:
        """Record tags (credentials redacted)."""
        from mlflow.entities import RunTag

        entries = [RunTag(k, v[:_MAX_TAG_LEN]) for k, v in scrub_mapping(tags, "tag").items()]
        for chunk in _chunks(entries, _MAX_PARAMS_TAGS):
            self._call("set_tags", self.client.log_batch, self.run_id, tags=chunk)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record metric values at `step` (0 when omitted)."""
        self.log_history([{**metrics, "_step": step or 0}], step_key="_step")

    def log_history(self, rows: list[dict[str, float]], step_key: str = "round") -> None:
        """Record metric rows in batches; each row's `step_key` is the step, the rest metrics."""
        entries = _history_metrics(rows, step_key, int(time.time() * 1000))
        for chunk in _chunks(entries, _MAX_METRICS):
            self._call("log_metrics", self.client.log_batch, self.run_id, metrics=chunk)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Upload a file, or a directory (under its own name unless `artifact_path` is given).

        Refuses (TrackingError) any file holding the value of a credential variable.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        self._refuse_secrets(path)
        if path.is_file():
            self._call("log_artifact", self.client.log_artifact, self.run_id, str(path),
                       artifact_path)
        else:
            self._call("log_artifacts", self.client.log_artifacts, self.run_id, str(path),
                       artifact_path if artifact_path is not None else path.name)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Upload text as a file (credentials redacted)."""
        self._call("log_text", self.client.log_text, self.run_id, scrub_text(text), artifact_file)

    def log_dict(self, data: dict[str, Any], artifact_file: str) -> None:
        """Upload a mapping as JSON, or YAML for a .yaml/.yml name (credentials redacted)."""
        if artifact_file.endswith((".yaml", ".yml")):
            import yaml

            text = yaml.safe_dump(data, sort_keys=False)
        else:
            text = json.dumps(data, indent=2, default=str)
        self.log_text(text, artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """Upload a matplotlib figure."""
        self._call("log_figure", self.client.log_figure, self.run_id, figure, artifact_file)

    def log_state_dict(self, state_dict: dict[str, Any], name: str) -> None:
        """Upload ``models/<name>.pt`` (skipped when tracking.log_models is false)."""
        if not self.log_models:
            return
        import torch

        relative = Path("models") / f"{name}.pt"
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / relative.name
            torch.save(state_dict, file)
            self.log_artifact(file, relative.parent.as_posix())

    def log_model(self, module: Any, name: str) -> str | None:
        """Log `module` as an MLflow model (flavor pytorch) of this run; return its id.

        The model is pickled with its pflpipe class, so ``mlflow.pytorch.load_model`` needs pflpipe
        installed; it is an MLflow 3 LoggedModel whose source run is this one (the runs table's
        Models column, the experiment's Models tab). Skipped (None) when tracking.log_models is
        false.
        """
        if not self.log_models:
            return None
        from mlflow.entities import LoggedModelOutput

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model"
            _save_torch_model(module, path)
            self._refuse_secrets(path)
            model = self._call("creation of a logged model", self.client.create_logged_model,
                               self.experiment_id, name=scrub_text(name),
                               source_run_id=self.run_id,
                               tags=scrub_mapping(self.context_tags, "tag"))
            self._call("upload of a logged model", self.client.log_model_artifacts,
                       model.model_id, str(path))
        self._call("finalize of a logged model", self.client.finalize_logged_model,
                   model.model_id, "READY")
        self._call("log_outputs", self.client.log_outputs, self.run_id,
                   [LoggedModelOutput(model.model_id, step=0)])
        return model.model_id

    def log_batch(self, rows: list[dict[str, float]] = (), metrics: dict[str, float] | None = None,
                  params: dict[str, Any] | None = None, *, step_key: str = "round",
                  model_id: str | None = None) -> None:
        """Record history rows, final metrics (linked to `model_id`) and params in one request."""
        from mlflow.entities import Metric, Param

        stamp = int(time.time() * 1000)
        entries = _history_metrics(rows, step_key, stamp)
        entries += [Metric(k, _number(k, v, 0), stamp, 0, model_id=model_id)
                    for k, v in (metrics or {}).items() if v is not None]
        clean = scrub_mapping(params or {}, "parameter")
        values = [Param(k, v if len(v) <= _MAX_PARAM_LEN else v[:_MAX_PARAM_LEN - 3] + "...")
                  for k, v in clean.items()]
        while entries or values:
            batch_params, values = values[:_MAX_PARAMS_TAGS], values[_MAX_PARAMS_TAGS:]
            room = _MAX_METRICS - len(batch_params)
            batch, entries = entries[:room], entries[room:]
            self._call("log_batch", self.client.log_batch, self.run_id, metrics=batch,
                       params=batch_params)

    def _refuse_secrets(self, path: Path) -> None:
        for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
            if name := find_secret(file.read_bytes()):
                raise TrackingError(f"refusing to upload {file} to MLflow: it contains the value "
                                    f"of ${name}")


def _history_metrics(rows, step_key: str, stamp: int) -> list:
    """MLflow metrics of history rows; each row's `step_key` is the step, the rest metrics."""
    from mlflow.entities import Metric

    entries = []
    for row in rows:
        if step_key not in row:
            raise KeyError(f"metric row {row!r} has no step column {step_key!r}")
        step = int(row[step_key])
        entries += [Metric(k, _number(k, v, step), stamp, step)
                    for k, v in row.items() if k != step_key and v is not None]
    return entries


def _save_torch_model(module: Any, path: Path) -> None:
    """Save `module` in MLflow's pytorch format; pickled (pt2 export needs an input example)."""
    import mlflow.pytorch
    import torch

    from pflpipe import __version__

    quiet = logging.getLogger("mlflow.pytorch")  # warns on every pickled model
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with _requirements_unchecked():
            mlflow.pytorch.save_model(
                module, str(path), serialization_format="pickle",
                pip_requirements=[f"pflpipe=={__version__}",
                                  f"torch=={torch.__version__.split('+')[0]}"])
    finally:
        quiet.setLevel(level)


@contextmanager
def _requirements_unchecked() -> Iterator[None]:
    """Skip MLflow's check of a saved model's pip requirements against the installed packages.

    The requirements `_save_torch_model` writes are the versions of this very process (pflpipe,
    torch, and mlflow's own pin), so the check cannot find a mismatch; yet for each model it maps
    every installed distribution to its modules (mlflow 3.x) — seconds per stage that logs a
    model per client.
    """
    try:
        from mlflow.utils import environment

        check = environment.warn_dependency_requirement_mismatches
    except (ImportError, AttributeError):  # another mlflow: leave it alone
        yield
        return
    environment.warn_dependency_requirement_mismatches = lambda requirements: None
    try:
        yield
    finally:
        environment.warn_dependency_requirement_mismatches = check
