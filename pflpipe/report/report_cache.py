"""What a rerun of `evaluate_fairness` on unchanged inputs reuses instead of redoing.

A rerun of the pipeline with nothing changed finds every training stage cached;
`collect_results` gathers the same files into a new folder and `evaluate_fairness` runs again,
into a new parent run. Its inputs
are hashed (`key`: the spec, every file of the results folders by name and content, and
pflpipe's own source), and under that key the storage root keeps
(``checkpoints/evaluate_fairness/<key>/``, `pflpipe.layout.stage_checkpoints`):

- the report's figures (`pflpipe.report.report_writer.draw_figures`), which are the report's
costliest
  part to make; the numbers, cheap, are computed again, so they are always today's code's;
- the MLflow run that logged the seeds (its per-algorithm and per-client child runs and their
  models): the new parent run is tagged `SEEDS_RUN_TAG` with its id instead of logging them again,
  as long as that run still exists in the same store and experiment.

Changed inputs give another key (a miss: everything is made and logged as on a first run). The
cache never costs a report: a store that cannot be read or written is noted and passed over.
"""

import hashlib
import json
import logging
from pathlib import Path

from pflpipe import layout
from pflpipe.errors import StorageError

log = logging.getLogger(__name__)

STAGE = "evaluate_fairness"
#: The parent run's tag naming the run whose child runs hold this run's seeds, clients and models.
SEEDS_RUN_TAG = "seeds_logged_in"
#: Raise to make every earlier record a miss (what is kept, or how, changed).
FORMAT = 1
FIGURES_JSON, LOGGED_JSON = layout.CACHED_FIGURES_JSON, layout.CACHED_LOGGED_JSON


def key(spec, results_dirs: list[Path]) -> str:
    """The hash of everything the report and the seeds' tracking are made from.

    Every file of the results folders by name and content: `collect_results` runs on every
    pipeline run and writes a new folder, the same bytes where its inputs were cached.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": FORMAT, "spec": spec.model_dump(mode="json")},
                             sort_keys=True).encode())
    for directory in map(Path, results_dirs):
        digest.update(b"\0folder")
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            digest.update(f"\0{path.relative_to(directory).as_posix()}\0".encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):  # noqa: B023
                    digest.update(block)
    digest.update(_source_digest().encode())
    return digest.hexdigest()[:16]


def _source_digest() -> str:
    """The digest of pflpipe's own code: a report made by other code is not reused."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]  # the package pflpipe
    for path in sorted(root.rglob("*.py")):
        digest.update(f"\0{path.relative_to(root)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


class ReportCache:
    """The records of one key in a `pflpipe.storage.Store`."""

    def __init__(self, store, digest: str):
        self.store, self.digest = store, digest

    def figures(self) -> tuple[dict[str, bytes], dict[str, dict[str, str]]] | None:
        """The figures kept for these inputs (as `draw_figures` returns them), or None."""
        try:
            if not self.store.exists(FIGURES_JSON):
                return None
            index = json.loads(self.store.get_bytes(FIGURES_JSON))
            images = {name: self.store.get_bytes(name) for name in index["images"]}
        except (OSError, StorageError, ValueError, KeyError) as err:
            log.warning("the report's kept figures could not be read: %s", err)
            return None
        return images, index["figure_files"]

    def keep_figures(self, images: dict[str, bytes],
                     figure_files: dict[str, dict[str, str]]) -> None:
        """Keep the figures drawn for these inputs (the index last: it marks them complete)."""
        try:
            for name, data in images.items():
                self.store.put_bytes(name, data)
            self.store.put_bytes(FIGURES_JSON, json.dumps(
                {"images": sorted(images), "figure_files": figure_files}).encode())
        except (OSError, StorageError) as err:
            log.warning("the report's figures could not be kept for a rerun: %s", err)

    def logged_run(self, tracker) -> str | None:
        """The run that logged these seeds into `tracker`'s store and experiment, if it exists."""
        try:
            if not self.store.exists(LOGGED_JSON):
                return None
            record = json.loads(self.store.get_bytes(LOGGED_JSON))
        except (OSError, StorageError, ValueError) as err:
            log.warning("the record of the run that logged the seeds could not be read: %s", err)
            return None
        if (record.get("tracking_uri") != getattr(tracker, "tracking_uri", None)
                or record.get("experiment_id") != getattr(tracker, "experiment_id", None)
                or not tracker.run_exists(record.get("run_id", ""))):
            return None
        return record["run_id"]

    def keep_logged(self, tracker) -> None:
        """Record that `tracker`'s run now holds the seeds' child runs."""
        try:
            self.store.put_bytes(LOGGED_JSON, json.dumps(
                {"tracking_uri": tracker.tracking_uri, "experiment_id": tracker.experiment_id,
                 "run_id": tracker.run_id}).encode())
        except (OSError, StorageError) as err:
            log.warning("the run that logged the seeds could not be recorded: %s", err)


def open_cache(spec, results_dirs: list[Path]) -> ReportCache | None:
    """The records for these inputs under the spec's storage root (None: it cannot be opened)."""
    from pflpipe.storage import open_store

    try:
        digest = key(spec, results_dirs)
        root = open_store(spec.storage, default_root=spec.experiment.results_dir)
        return ReportCache(root.child(layout.stage_checkpoints(STAGE, digest)), digest)
    except (OSError, StorageError, ValueError) as err:
        log.warning("the report's inputs could not be hashed or its store opened: %s", err)
        return None
