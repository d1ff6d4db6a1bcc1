"""Entry points the CLI and the components call.

They resolve the tracking URI, open and finish the pipeline's parent run, and open a stage's child
run.

The CLI opens the parent before the pipeline starts (creating the sqlite database and the
experiment once, before any fan-out) and passes ``ParentRun.pipeline_parameters()`` to the
pipeline. Each component opens ``child_run(...)`` under it. With tracking disabled the parent's
run id is empty and every child is the no-op ``NULL_TRACKER``.
"""

import json
import logging
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pflpipe.errors import TrackingError
from pflpipe.spec.sections import tracking_scheme, tracking_uri_problem
from pflpipe.spec.sweep import combinations
from pflpipe.tracking.mlflow_store import _client, _guarded, move_credentials
from pflpipe.tracking.mlflow_tracker import ROOT_TAG, MlflowTracker
from pflpipe.tracking.scrub import scrub_text
from pflpipe.tracking.tracker import NULL_TRACKER, Tracker
from pflpipe.version import __version__

log = logging.getLogger(__name__)
#: Tags of a run's owner process, which alone ends the run (see `close_abandoned_runs`).
PID_TAG, HOST_TAG = "pflpipe_pid", "pflpipe_host"
#: The experiment tag with which MLflow 3's UI opened an experiment on its runs ("model
#: training") view instead of its GenAI overview. MLflow 3.17's UI decides by a switch of its
#: own instead; `ParentRun.ui_url` gives an address that opens on the runs.
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"


def resolve_tracking_uri(tracking_spec=None) -> str:
    """Return the tracking URI: spec, else $MLFLOW_TRACKING_URI, else ``./mlflow.db`` (absolute).

    A relative sqlite path is made absolute against the working directory, so every process of
    a pipeline run (and ``mlflow ui``) finds the same database.
    """
    uri = (getattr(tracking_spec, "uri", None) or os.environ.get("MLFLOW_TRACKING_URI")
           or "sqlite:///mlflow.db")
    scheme = tracking_scheme(uri)
    if scheme in ("", "file") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
        raise TrackingError(
            f"tracking URI {scrub_text(uri)!r} is MLflow's file store, which MLflow ≥ 3.13 refuses;"
            " use sqlite:///mlflow.db (or migrate: mlflow migrate-filestore) or an http(s) server")
    if scheme != "file" and (problem := tracking_uri_problem(uri) or _driver_problem(uri)):
        error = TrackingError(f"tracking URI {scrub_text(uri)!r}: {problem}")
        error.bad_input = True  # the user's setting: exit 2
        raise error
    if uri.startswith("sqlite:///"):
        path, sep, query = uri[len("sqlite:///"):].partition("?")
        return f"sqlite:///{(Path.cwd() / path).resolve()}{sep}{query}"
    return move_credentials(uri)


#: The database driver SQLAlchemy uses for a scheme that names none, and its pip package.
DEFAULT_DRIVERS = {"postgresql": ("psycopg2", "psycopg2-binary"),
                   "mysql": ("MySQLdb", "mysqlclient"), "mssql": ("pyodbc", "pyodbc")}


def _driver_problem(uri: str) -> str | None:
    """Say which package a database URI's driver needs when it is not installed."""
    import importlib.util

    scheme = uri.split("://", 1)[0]
    if "+" in scheme or scheme not in DEFAULT_DRIVERS:
        return None   # a named driver (postgresql+pg8000) is SQLAlchemy's to load
    module, package = DEFAULT_DRIVERS[scheme]
    if importlib.util.find_spec(module) is not None:
        return None
    return (f"{scheme}:// needs the database driver {module}, which is not installed; "
            f"`pip install {package}` (in every image that runs a stage), or name an installed "
            f"driver in the URI ({scheme}+DRIVER://...)")


def quiet_mlflow_logs() -> None:
    """Import mlflow, which sets its loggers up on import, and quiet its INFO lines after that.

    ("Creating database tables" and the like, which would interleave with the run's lines.)
    """
    import mlflow  # noqa: F401

    logging.getLogger("mlflow").setLevel(logging.WARNING)


def ready_to_finish(tracking_uri: str) -> None:
    """Import mlflow and open the store at `tracking_uri`: ending a run then only writes."""
    quiet_mlflow_logs()
    _client(tracking_uri)


def without_credentials(spec):
    """Return `spec` with ``user:password@`` taken out of `tracking.uri` (into MLflow's variables).

    The spec travels into the pipeline (its JSON is a parameter of every task, printed by the
    local runner, compiled into the IR), so its URI must carry no credentials; the processes of
    a local run inherit MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD instead.
    """
    uri = spec.tracking.uri
    if not uri or move_credentials(uri) == uri:
        return spec
    data = spec.model_dump(mode="json", by_alias=True)
    data["tracking"]["uri"] = move_credentials(uri)
    return type(spec).model_validate(data)


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Flatten nested mappings and lists of mappings into dotted keys with string values.

    >>> flatten({"partition": {"alpha": 0.5}, "seeds": [0, 1], "algos": [{"name": "ditto"}]})
    {'partition.alpha': '0.5', 'seeds': '[0, 1]', 'algos.0.name': 'ditto'}
    """
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        out = {}
        for index, item in enumerate(data):
            out |= flatten(item, f"{prefix}.{index}")
        return out
    return {prefix: data if isinstance(data, str) else json.dumps(data)}


def git_commit(cwd: Path | None = None) -> str | None:
    """Return the commit checked out in `cwd`, or None outside a repository.

    The default is pflpipe's own source directory: the code that ran, wherever the user ran it
    from (an installed, non-repository copy gives None).
    """
    cwd = cwd or Path(__file__).resolve().parent
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                                text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _artifact_location(tracking_uri: str) -> str | None:
    """Artifacts of a sqlite store go beside the database, never into the working directory."""
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
        return (database.parent / "mlartifacts").as_uri()
    return None


def _experiment_id(client, name: str, tracking_uri: str) -> str:
    experiment = _guarded("lookup of experiment", tracking_uri, client.get_experiment_by_name,
                          name)
    if experiment is None:
        try:
            return _guarded(f"creation of experiment {name!r}", tracking_uri,
                            client.create_experiment, name, artifact_location=_artifact_location(
                                tracking_uri), tags={KIND_TAG: KIND})
        except TrackingError:  # another process created it first?
            experiment = _guarded("lookup of experiment", tracking_uri,
                                  client.get_experiment_by_name, name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        raise TrackingError(
            f"MLflow experiment {name!r} is deleted at {scrub_text(tracking_uri)}; restore it "
            f"(mlflow experiments restore --experiment-id {experiment.experiment_id}) or set "
            "tracking.experiment to another name")
    if experiment.tags.get(KIND_TAG) != KIND:
        _guarded("tagging of the experiment", tracking_uri, client.set_experiment_tag,
                  experiment.experiment_id, KIND_TAG, KIND)
    return experiment.experiment_id


@dataclass(frozen=True)
class ParentRun:
    """The pipeline run's parent run; an empty `run_id` means tracking is off."""

    run_id: str
    tracking_uri: str
    experiment: str
    experiment_id: str = ""
    log_models: bool = True

    def pipeline_parameters(self) -> dict[str, str]:
        """Return the values the pipeline receives as parameters."""
        return {"parent_run_id": self.run_id, "tracking_uri": self.tracking_uri,
                "experiment": self.experiment}

    def tracker(self) -> Tracker:
        """Return a tracker on the parent run (fairness metrics, report, figures)."""
        if not self.run_id:
            return NULL_TRACKER
        return MlflowTracker(_client(self.tracking_uri), self.run_id, self.experiment_id,
                             tracking_uri=self.tracking_uri, log_models=self.log_models,
                             context_tags={ROOT_TAG: self.run_id})

    def finish(self, status: str = "FINISHED") -> None:
        """End the parent run."""
        finish_parent(self.run_id, status, tracking_uri=self.tracking_uri)

    def ui_url(self, server: str | None = None) -> str:
        """The MLflow UI page of this run's experiment, on the runs (model training) view.

        `server` is the UI's address (the tracking URI when it is an HTTP server). MLflow 3.17's
        UI ignores the experiment's ``mlflow.experimentKind`` tag and opens on its GenAI view
        unless the address says ``workflowType=machine_learning`` (or the user switched once).
        """
        base = server or (self.tracking_uri if self.tracking_uri.startswith("http")
                          else "http://127.0.0.1:5000")
        return (f"{base.rstrip('/')}/#/experiments/{self.experiment_id}"
                f"?workflowType=machine_learning")


def parent_run_name(spec) -> str:
    """Name the parent run by the spec and what it holds.

    E.g. ``persfl-digits · fedavg+persfl+fedper · seeds 0-2`` (the local baseline always runs);
    a sweep's says what it sweeps: ``sweep-ui · sweep of partition.alpha (2 points) · fedavg ·
    seed 0``.
    """
    models = "+".join(["fedavg", *(e.display_name for e in spec.personalization
                                   if e.name != "local")])
    seeds = sorted(spec.experiment.seeds)
    if len(seeds) == 1:
        which = f"seed {seeds[0]}"
    elif seeds == list(range(seeds[0], seeds[-1] + 1)):
        which = f"seeds {seeds[0]}-{seeds[-1]}"
    else:
        which = "seeds " + ",".join(map(str, seeds))
    swept = ""
    if spec.sweep:
        count = len(combinations(spec.sweep))
        swept = f" · sweep of {', '.join(spec.sweep)} ({count} point{'s' * (count > 1)})"
    return f"{spec.experiment.name}{swept} · {models} · {which}"


def describe(spec) -> str:
    """The parent run's description: the spec's, else what was run (the MLflow UI shows it)."""
    if spec.experiment.description:
        return spec.experiment.description
    part, fed = spec.partition, spec.federation
    held = f", {part.classes_per_client} classes each" if hasattr(part, "classes_per_client") \
        else ""
    labels = ", ".join(e.display_name for e in spec.personalization if e.name != "local")
    return (f"{spec.dataset.name}, {part.strategy} over {part.n_clients} clients{held}; FedAvg "
            f"warm start of {fed.rounds} rounds, then {labels or 'no personalization'} against "
            f"FedAvg and the local baseline; seeds {', '.join(map(str, spec.experiment.seeds))}."
            " Child runs: one per algorithm (mean over clients, per round), under each one per "
            "client.")


def open_parent_run(spec, *, seed: int | None = None, tags: dict[str, str] | None = None,
                    spec_yaml: str | None = None, run_name: str | None = None,
                    tracking_uri: str | None = None, experiment: str | None = None,
                    owner_pid: int | None = None) -> ParentRun:
    """Create the experiment if needed and the parent run of one pipeline run.

    Tags: ``spec_hash``, ``pflpipe_version``, ``git_commit`` (when in a repository), ``seed`` (or
    ``seeds``), ``storage`` (the store's URI), the description plus `tags`; with `owner_pid`
    (the process that will finish the run) ``pflpipe_pid`` and ``pflpipe_host``. Params: the
    flattened spec. Artifacts: ``spec.yaml`` (the text as written, when given) and
    ``spec_resolved.yaml`` (defaults filled). `tracking_uri` and `experiment` override the
    spec's (the pipeline's parameters).

    First, every run of the experiment left RUNNING by an owner process of this host that is gone
    (killed) is marked KILLED, with its running descendants (`close_abandoned_runs`).
    """
    experiment = experiment or spec.tracking.experiment or spec.experiment.name
    if not spec.tracking.enabled:
        return ParentRun("", "", experiment, log_models=False)
    tracking_uri = resolve_tracking_uri(spec.tracking) if not tracking_uri else tracking_uri
    client = _client(tracking_uri)
    experiment_id = _experiment_id(client, experiment, tracking_uri)
    close_abandoned_runs(client, experiment_id, tracking_uri)
    run_tags = {"spec_hash": spec.content_hash(), "pflpipe_version": __version__,
                "experiment": spec.experiment.name, "storage": _storage_uri(spec)}
    if owner_pid is not None:
        run_tags |= {PID_TAG: str(owner_pid), HOST_TAG: socket.gethostname()}
    if seed is not None:
        run_tags["seed"] = str(seed)
    else:
        run_tags["seeds"] = ",".join(map(str, spec.experiment.seeds))
    if commit := git_commit():
        run_tags |= {"git_commit": commit, "mlflow.source.git.commit": commit}
    run_tags["mlflow.note.content"] = describe(spec)
    run_tags |= {k: str(v) for k, v in (tags or {}).items()}
    name = run_name or parent_run_name(spec)
    run = _guarded("creation of the parent run", tracking_uri, client.create_run, experiment_id,
                    run_name=scrub_text(name))
    parent = ParentRun(run.info.run_id, tracking_uri, experiment, experiment_id,
                       spec.tracking.log_models)
    tracker = parent.tracker()
    try:
        tracker.set_tags(run_tags)
        resolved = spec.model_dump(mode="json", by_alias=True)
        tracker.log_params(flatten(resolved))
        if spec_yaml is not None:
            tracker.log_text(spec_yaml, "spec.yaml")
        tracker.log_dict(resolved, "spec_resolved.yaml")
    except BaseException:
        parent.finish("FAILED")
        raise
    log.info("MLflow parent run %s in experiment %r at %s", parent.run_id, experiment,
             scrub_text(tracking_uri))
    return parent


def close_abandoned_runs(client, experiment_id: str, tracking_uri: str) -> list[str]:
    """Mark KILLED the RUNNING parent runs whose owner process on this host is gone.

    A `pflpipe run` killed by a signal it cannot catch (SIGKILL, the OOM killer, a closed
    terminal's machine) cannot end its runs; the next one on the same host does. A live owner
    (or one on another host) is left alone. Returns the ids of the parents marked.
    """
    host = socket.gethostname()
    running = _guarded("search for running runs", tracking_uri, client.search_runs,
                        [experiment_id], f"attributes.status = 'RUNNING' and "
                        f"tags.{HOST_TAG} = '{host}'")
    closed = []
    for run in running:
        pid = run.data.tags.get(PID_TAG, "")
        if not pid.isdigit() or _alive(int(pid)):
            continue
        descendants = _guarded("search for running runs", tracking_uri, client.search_runs,
                                [experiment_id], f"attributes.status = 'RUNNING' and "
                                f"tags.{ROOT_TAG} = '{run.info.run_id}'")
        for stale in [*descendants, run]:
            _guarded("end of an abandoned run", tracking_uri, client.set_terminated,
                      stale.info.run_id, "KILLED")
        log.warning("MLflow run %s was left RUNNING by process %s, which is gone; marked it "
                    "and %d running child run(s) KILLED", run.info.run_id, pid, len(descendants))
        closed.append(run.info.run_id)
    return closed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _storage_uri(spec) -> str:
    storage = spec.storage
    if storage.kind == "s3":
        where = "/".join(p for p in (storage.bucket, storage.prefix.strip("/")) if p)
        return f"s3://{where}" + (f" at {storage.endpoint_url}" if storage.endpoint_url else "")
    return f"local:{storage.path or spec.experiment.results_dir}"


def finish_parent(run_id: str, status: str = "FINISHED", *, tracking_uri: str | None = None
                  ) -> None:
    """End the parent run with `status` (FINISHED, FAILED or KILLED); no-op for an empty id."""
    if not run_id:
        return
    uri = tracking_uri or resolve_tracking_uri()
    _guarded("end of the parent run", uri, _client(uri).set_terminated, run_id, status)


class _Failed(Exception):
    """Ends a run FAILED (see `record_failure`)."""


def record_failure(parent: ParentRun, name: str, stage: str, error: str,
                   log_path: Path | None = None, tags: dict[str, str] | None = None) -> None:
    """Leave a FAILED run under the parent for a stage that failed, with its error and log.

    The training stages track nothing themselves (they are cached), so this is where MLflow
    learns which stage failed and why.
    """
    if not parent.run_id:
        return
    tags = {"stage": stage, **(tags or {}), "mlflow.note.content": error}
    try:
        with parent.tracker().child(name, {k: v for k, v in tags.items() if v}) as run:
            if log_path is not None and Path(log_path).is_file():
                run.log_artifact(Path(log_path), "logs")
            raise _Failed
    except _Failed:
        pass
    except TrackingError as err:
        log.warning("could not record the failure of %s in MLflow: %s", name, err)


def parent_tracker(tracking_spec, tracking_uri: str, parent_run_id: str,
                   experiment: str | None = None) -> Tracker:
    """Return a tracker on the existing parent run (the last stage logs its metrics there)."""
    if not tracking_spec.enabled or not parent_run_id:
        return NULL_TRACKER
    return MlflowTracker.attach(tracking_uri or resolve_tracking_uri(tracking_spec),
                                parent_run_id, experiment=experiment or None,
                                log_models=tracking_spec.log_models)


@contextmanager
def child_run(tracking_spec, tracking_uri: str, experiment: str, parent_run_id: str, name: str,
              tags: dict[str, str] | None = None) -> Iterator[Tracker]:
    """Open a stage's child run under the parent; yield NULL_TRACKER when tracking is off.

    The run is tagged ``stage`` = `name` (override through `tags`, e.g. ``personalize/ditto``
    with ``{"stage": "personalize", "algorithm": "ditto"}``) and ``root_run_id``; its own children
    inherit these tags. It ends FINISHED, or FAILED when the block raises (the error propagates).
    """
    parent = parent_tracker(tracking_spec, tracking_uri, parent_run_id, experiment)
    if parent is NULL_TRACKER:
        yield NULL_TRACKER
        return
    with parent.child(name, {"stage": name, **(tags or {})}) as tracker:
        yield tracker
