"""Which paths of a spec the tasks of a run share, and a clear refusal for those they cannot.

The tasks of a pipeline read and write files the spec names: the results directory, the local
checkpoint store, the sqlite file of a tracking store, the dataset's files. Each task hands its
successors what it wrote there, so each path must be one the tasks share:

- `pflpipe run` (the subprocess runner): every task is a process of this machine; all is shared.
- `pflpipe run --runner docker`: a task sees only what the runner mounts into its container (the
  working directory and the results directory); a write anywhere else lands on the container's
  own disk and vanishes with it, silently.
- `pflpipe submit`: a pod shares no local disk with the next one, only the S3 store and the
  tracking server. An absolute dataset root a task only reads may be in the image or a volume.

`unshared` is the one rule for all three: the paths a runner does not share, each as a line that
names the spec field and the fix. The CLI refuses such a spec (exit 2) before any task starts.
"""

import os
from dataclasses import dataclass
from pathlib import Path

#: The datasets whose files a task reads from `dataset.root` (the others are generated or bundled).
FILE_DATASETS = ("mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "arrays",
                 "client_files")


@dataclass(frozen=True)
class TaskPath:
    """A host path the tasks touch, by the spec field (or variable) that names it."""

    field: str
    path: Path        # absolute, against the working directory
    given: str        # as the spec (or the environment) gives it
    written: bool     # a task writes there (else it only reads)

    @property
    def relative(self) -> bool:
        """Whether it was given relative to the working directory."""
        return not self.given.startswith(("sqlite:", "/", "~"))


@dataclass(frozen=True)
class Sharing:
    """What the tasks of one kind of run share: host directories, mounted at their own path."""

    runner: str                       # "docker", "cluster"
    mounts: tuple[Path, ...] = ()
    #: Whether an absolute path a task only reads counts as provided (by the image, a volume).
    trusts_absolute_inputs: bool = False
    #: Whether the tasks reach only a tracking server (http, https), no database of the host's.
    tracks_to_servers_only: bool = False

    def shares(self, item: TaskPath) -> bool:
        """Whether every task of the run sees `item` as the host does."""
        if self.trusts_absolute_inputs and not item.relative and not item.written:
            return True
        real = _real(item.path)  # a link inside a mount may point outside it
        return any(real == root or root in real.parents for root in map(_real, self.mounts))


def docker_sharing(results_dir: str | Path, cwd: Path | None = None) -> Sharing:
    """What `pflpipe run --runner docker` mounts: the working and the results directory.

    Links are resolved: a results directory reached through a link that leaves the working
    directory is mounted at its real path, where the link leads inside the container too.
    """
    cwd = Path(cwd or os.getcwd())
    results, real_cwd = _real(_absolute(results_dir, cwd)), _real(cwd)
    inside = results == real_cwd or real_cwd in results.parents
    return Sharing("docker", (cwd,) if inside else (cwd, results))


#: A cluster's pods share no local path, and reach no database of this machine.
CLUSTER = Sharing("cluster", trusts_absolute_inputs=True, tracks_to_servers_only=True)


def task_paths(spec, tracking_uri: str | None, cwd: Path | None = None) -> list[TaskPath]:
    """Every host path the tasks of `spec` hand on to each other or read as given.

    `tracking_uri` is the resolved tracking URI (None: nothing is tracked); a sqlite store is its
    file's directory, where sqlite keeps its journal beside the file. The results directory is
    not listed: the local runners share it by construction and pods never write there. A dataset
    with a `source` (or `allow_download`) is not either: each task downloads it for itself.
    """
    cwd = Path(cwd or os.getcwd())
    found = []
    if spec.storage.kind == "local":
        store = spec.storage.path or spec.experiment.results_dir
        found.append(TaskPath("storage.path" if spec.storage.path else "storage.kind",
                              _absolute(store, cwd), store, True))
    if tracking_uri and tracking_uri.startswith("sqlite:///"):
        file = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
        found.append(TaskPath("tracking.uri", _absolute(file, cwd).parent,
                              tracking_uri.split("?", 1)[0], True))
    dataset = spec.dataset
    fetched = getattr(dataset, "source", None) or getattr(dataset, "allow_download", False)
    if dataset.name in FILE_DATASETS and not fetched:
        found.append(TaskPath("dataset.root", _absolute(dataset.root, cwd), dataset.root, False))
    index = getattr(spec.partition, "path", None)
    if index and not fetched:
        path = index if Path(index).is_absolute() else str(Path(dataset.root) / index)
        found.append(TaskPath("partition.path", _absolute(path, cwd), path, False))
    return found


def unshared(spec, sharing: Sharing, tracking_uri: str | None,
             cwd: Path | None = None) -> list[str]:
    """The paths of `spec` the tasks under `sharing` do not share: one line each, with the fix."""
    found = [item for item in task_paths(spec, tracking_uri, cwd) if not sharing.shares(item)]
    if (sharing.tracks_to_servers_only and tracking_uri and not tracking_uri.startswith(
            ("http://", "https://")) and not any(i.field == "tracking.uri" for i in found)):
        found.append(TaskPath("tracking.uri", Path(), tracking_uri.split("?", 1)[0], True))
    return [_problem(item, sharing) for item in found]


def _problem(item: TaskPath, sharing: Sharing) -> str:
    if sharing.runner == "cluster":
        return f"{item.field}: {CLUSTER_FIX[item.field].format(given=item.given)}"
    mounts = " and ".join(str(m) for m in sharing.mounts)
    lost = ("would write into its container's own disk, lost when the task ends" if item.written
            else "would not find it")
    real = _real(item.path)
    where = item.path if real == item.path else f"{item.path} (a link to {real})"
    return (f"{item.field}: {where} is outside what the docker runner mounts ({mounts}); "
            f"a task {lost}; {DOCKER_FIX[item.field]}")


DOCKER_FIX = {
    "storage.path": "put the checkpoint store under the working directory or the results "
                    "directory (omitted, it is the results directory), or use an S3 store "
                    "(storage.kind: s3)",
    "tracking.uri": "keep the sqlite file under the working directory (sqlite:///mlflow.db), "
                    "or track to an MLflow server (one on the host's 127.0.0.1 works: the "
                    "containers share the host's network)",
    "dataset.root": "put the dataset under the working directory (dataset.root: data), or run "
                    "from a directory that holds it",
    "partition.path": "put the index file under the working directory, or run from a "
                      "directory that holds it",
}
DOCKER_FIX["storage.kind"] = DOCKER_FIX["storage.path"]

CLUSTER_FIX = {
    "storage.kind": "a local checkpoint store ({given}) is each pod's own disk, which the next "
                    "task never sees; use an S3 store (storage: {{kind: s3, bucket: ..., "
                    "endpoint_url: ...}}, docs/cluster.md)",
    "tracking.uri": "tracking URI {given!r} is a local store that pods on a cluster cannot "
                    "reach; set tracking.uri (or MLFLOW_TRACKING_URI) to an MLflow server, e.g. "
                    "http://mlflow.kubeflow:5000, or set tracking.enabled: false",
    "dataset.root": "{given!r} is relative to a pod's own empty working directory; give "
                    "dataset.source (an s3:// URI each task downloads from) or an absolute "
                    "root that the image or a volume provides",
}
CLUSTER_FIX["storage.path"] = CLUSTER_FIX["storage.kind"]
CLUSTER_FIX["partition.path"] = CLUSTER_FIX["dataset.root"]


def _real(path: Path) -> Path:
    """`path` with every link resolved (the part that does not exist yet kept as given)."""
    return Path(os.path.realpath(path))


def _absolute(path: str | Path, cwd: Path) -> Path:
    return Path(os.path.normpath(cwd / Path(path).expanduser()))
