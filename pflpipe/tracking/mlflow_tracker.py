"""The MLflow tracker: a parent run per pipeline run, child runs per stage and algorithm.

Built on ``mlflow.MlflowClient`` with explicit run ids (no fluent global state, so the
``MLFLOW_RUN_ID`` variable that KFP's MLflow plugin injects cannot hijack a run). mlflow is imported
inside functions only, so ``import pflpipe.tracking`` stays light.

The entry points that create these trackers live in `pflpipe.tracking.runs`; a stage only sees
the `Tracker` interface: ``tracker.child("fedper", {"algorithm": "fedper"})`` per algorithm,
``log_batch`` for metrics, ``log_table`` for per-client tables, ``log_model`` for models.
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
from pflpipe.tracking.mlflow_store import _client, _guarded
from pflpipe.tracking.scrub import find_secret, scrub_mapping, scrub_text
from pflpipe.tracking.tracker import Tracker

log = logging.getLogger(__name__)
T = TypeVar("T")

PARENT_TAG = "mlflow.parentRunId"
ROOT_TAG = "root_run_id"
_MAX_PARAMS_TAGS, _MAX_METRICS, _MAX_PARAM_LEN, _MAX_TAG_LEN = 100, 1000, 6000, 8000

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

    def run_exists(self, run_id: str) -> bool:
        """Whether run `run_id` exists (not deleted) in this run's store and experiment."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        return (run.info.lifecycle_stage != "deleted"
                and run.info.experiment_id == self.experiment_id)

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
            if not self._link(path, artifact_path or ""):
                self._call("log_artifact", self.client.log_artifact, self.run_id, str(path),
                           artifact_path)
        else:
            folder = artifact_path if artifact_path is not None else path.name
            if not self._link(path, folder):
                self._call("log_artifacts", self.client.log_artifacts, self.run_id, str(path),
                           folder)

    def _link(self, path: Path, folder: str) -> bool:
        """Link a file or a directory's files into the run's artifacts if they are a local folder.

        (A sqlite or file store's: a finished output is not copied twice on one disk,
        `layout.link_file`.) False where the artifacts are elsewhere (a server, a bucket).
        """
        from urllib.parse import unquote, urlparse

        from pflpipe.layout import link_file, link_tree

        uri = self._call("lookup of run", self.client.get_run, self.run_id).info.artifact_uri
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file") or parsed.netloc:
            return False
        target = Path(unquote(parsed.path)) / folder
        if path.is_file():
            target.mkdir(parents=True, exist_ok=True)
            link_file(path, target / path.name)
        else:
            link_tree(path, target)
        return True

    def log_text(self, text: str, artifact_file: str) -> None:
        """Upload text as a file (credentials redacted)."""
        self._call("log_text", self.client.log_text, self.run_id, scrub_text(text), artifact_file)

    def log_dataset(self, name: str, digest: str, source: str, context: str = "train") -> None:
        """Record a dataset input: `name` and `digest` show in the runs table's Dataset column."""
        from mlflow.data.http_dataset_source import HTTPDatasetSource
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        dataset = MetaDataset(HTTPDatasetSource(source), name=scrub_text(name), digest=digest)
        tags = [InputTag("mlflow.data.context", context)]
        self._call("logging of a dataset input", self.client.log_inputs, self.run_id,
                   [DatasetInput(dataset._to_mlflow_entity(), tags)])

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

        from pflpipe.data.files import own_state

        relative = Path("models") / f"{name}.pt"
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / relative.name
            torch.save(own_state(state_dict), file)
            self.log_artifact(file, relative.parent.as_posix())

    def log_table(self, rows: list[dict[str, Any]], artifact_file: str) -> None:
        """Upload `rows` as an MLflow table (the Evaluation view compares runs' tables)."""
        columns = list(dict.fromkeys(key for row in rows for key in row))
        data = {column: [row.get(column) for row in rows] for column in columns}
        self._call("log_table", self.client.log_table, self.run_id, data, artifact_file)

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

    from pflpipe.version import __version__

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
