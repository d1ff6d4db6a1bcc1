"""Stage `partition_data`: split the spec's dataset over clients; write the partition directory.

A partition that `pflpipe split` wrote into the default directory (`default_dir`) for the same
data, partition section and seed is reused (its files linked or copied, after checking their
content hash) instead of written again, so `pflpipe run` trains on exactly the split the user
inspected, with the same content hash.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from pflpipe import markdown
from pflpipe.errors import DataError
from pflpipe.events import notice, warning
from pflpipe.layout import MANIFEST_JSON, link_file
from pflpipe.tracking import NULL_TRACKER, Tracker

log = logging.getLogger(__name__)
#: to_markdown lists at most this many clients (the manifest has them all).
MARKDOWN_ROWS = 200
#: A client's validation split smaller than this is too small to choose models on (a warning).
MIN_VALIDATION = 10
NO_VALIDATION = ("no validation split: best_val is each client's last round (or epoch), "
                 "PersFL's teacher the last round, its (λ, T) chosen on train")


@dataclass(frozen=True)
class ClientSummary:
    """One client's sizes per split and the classes it holds (None for regression)."""

    client_id: int
    n_train: int
    n_val: int
    n_test: int
    classes: tuple[int, ...] | None

    @property
    def n(self) -> int:
        """Total samples."""
        return self.n_train + self.n_val + self.n_test


@dataclass(frozen=True)
class PartitionResult:
    """What partition_data wrote: where, its content hash and a per-client summary."""

    out_dir: Path
    content_hash: str
    seed: int
    dataset: str
    strategy: str
    n_classes: int | None
    n_samples: int
    n_assigned: int
    clients: tuple[ClientSummary, ...]
    warnings: tuple[str, ...] = ()
    reused_from: Path | None = None

    @classmethod
    def from_manifest(cls, out_dir: Path, manifest: dict, reused_from: Path | None = None
                      ) -> "PartitionResult":
        """Summarise a partition manifest."""
        clients = tuple(
            ClientSummary(entry["client_id"], entry["n"]["train"], entry["n"]["val"],
                          entry["n"]["test"],
                          None if entry["classes"] is None else tuple(entry["classes"]))
            for entry in manifest["clients"])
        return cls(out_dir=Path(out_dir), content_hash=manifest["content_hash"],
                   seed=manifest["seed"], dataset=manifest["dataset"]["name"],
                   strategy=manifest["partition"]["strategy"],
                   n_classes=manifest["dataset"]["n_classes"],
                   n_samples=manifest["dataset"]["n_samples"],
                   n_assigned=manifest["n_assigned"], clients=clients,
                   warnings=validation_warnings(clients), reused_from=reused_from)

    def to_markdown(self) -> str:
        """Return a per-client table (sizes per split, classes held) under a one-line summary."""
        lines = [f"**partition_data**: {self.dataset}, {self.strategy}, {len(self.clients)} "
                 f"clients, seed {self.seed}; {self.n_assigned:,} of {self.n_samples:,} samples "
                 f"assigned; content hash `{self.content_hash[:16]}`", "",
                 *([f"- reused the partition written by `pflpipe split` in "
                    f"{self.reused_from}"] if self.reused_from else []),
                 *(f"- **warning**: {warning}" for warning in self.warnings),
                 "", *markdown.table(
                     ["client", "train", "val", "test", "total", "classes"],
                     [[c.client_id, c.n_train, c.n_val, c.n_test, c.n, format_classes(c.classes)]
                      for c in self.clients[:MARKDOWN_ROWS]], "rrrrrl")]
        if len(self.clients) > MARKDOWN_ROWS:
            lines.append(f"\n{len(self.clients) - MARKDOWN_ROWS} more clients in {MANIFEST_JSON}")
        return "\n".join(lines) + "\n"


def default_dir(spec, seed: int) -> Path:
    """Where `pflpipe split` writes a seed's partition, and where `pflpipe run` looks for it."""
    from pflpipe.layout import partition_dir

    return partition_dir(spec.experiment.results_dir, seed)


def run(spec, seed: int, out_dir: Path, *, tracker: Tracker = NULL_TRACKER,
        reuse_split: bool = True) -> PartitionResult:
    """Partition the spec's dataset with `seed` into `out_dir`; log the summary and heatmap.

    With `reuse_split`, the partition `pflpipe split` wrote in `default_dir` is reused when it is
    this one.
    """
    from pflpipe.data import partition_dataset
    from pflpipe.data.artifact import HEATMAP, MANIFEST

    plan = partition_dataset(spec, seed)
    section = spec.partition.model_dump(mode="json")
    source = default_dir(spec, seed)
    manifest = _reuse(plan, section, source, Path(out_dir)) if reuse_split else None
    if manifest is None:
        manifest = _write_beside_heatmap(plan, section, Path(out_dir))
        source = None
    else:
        notice(f"reused the partition of `pflpipe split` in {source}", reused=True)
    result = PartitionResult.from_manifest(Path(out_dir), manifest, reused_from=source)
    from pflpipe.data.plan import ignored_splits

    for caveat in (*result.warnings, *filter(None, [ignored_splits(spec, plan.pooled)])):
        log.info("%s", caveat)
        warning(caveat)
    sizes = [client.n for client in result.clients]
    tracker.log_params({"dataset": result.dataset, "strategy": result.strategy,
                        "n_clients": len(result.clients), "seed": seed,
                        "content_hash": result.content_hash})
    tracker.log_metrics({"n_clients": len(result.clients), "n_assigned": result.n_assigned,
                         "min_client_size": min(sizes), "max_client_size": max(sizes)})
    tracker.log_artifact(Path(out_dir) / HEATMAP, "partition")
    tracker.log_artifact(Path(out_dir) / MANIFEST, "partition")
    log.info("partition %s written to %s", result.content_hash[:16], out_dir)
    return result


def _write_beside_heatmap(plan, section: dict, out_dir: Path) -> dict:
    """`write_partition`, its heatmap drawn by a forked child (`pflpipe.beside.Beside`).

    The child imports matplotlib (~0.3 CPU s) while this process imports torch and writes the
    clients' files; it draws once the manifest is known, before the manifest is written.
    """
    from pflpipe.beside import Beside
    from pflpipe.data import write_partition
    from pflpipe.data.artifact import HEATMAP
    from pflpipe.data.heatmap import draw_heatmap

    def draw(manifest: dict) -> None:
        draw_heatmap(manifest, plan, out_dir / HEATMAP)

    with Beside(draw, preload=("matplotlib.figure",), name="partition heatmap") as figure:
        def send(manifest: dict) -> None:
            figure.send(manifest)
            figure.result()

        return write_partition(plan, section, out_dir, heatmap=send)


def validation_warnings(clients: tuple[ClientSummary, ...]) -> tuple[str, ...]:
    """Say when the clients have no validation split, or one too small to choose on."""
    if all(client.n_val == 0 for client in clients):
        return (NO_VALIDATION,)
    small = [client for client in clients if client.n_val < MIN_VALIDATION]
    if not small:
        return ()
    smallest = min(small, key=lambda client: client.n_val)
    return (f"{len(small)} of {len(clients)} clients have fewer than {MIN_VALIDATION} "
            f"validation samples (smallest: client {smallest.client_id}, {smallest.n_val}); "
            "the best round, teacher and (λ, T) chosen on them are noisy. Raise "
            "partition.fractions.val or min_samples",)


def _reuse(plan, section: dict, source: Path, out_dir: Path) -> dict | None:
    """Link (or copy) `source`'s partition into `out_dir` if it is this plan's; return its manifest.

    It is this plan's when its manifest header equals the plan's (same data fingerprint,
    normalisation, partition section and seed) and its files still have their content hash.
    """
    from pflpipe.data import load_partition, read_manifest
    from pflpipe.data.artifact import HEATMAP, MANIFEST, manifest_header

    if source.resolve() == out_dir.resolve() or not (source / MANIFEST).is_file():
        return None
    try:
        manifest = read_manifest(source)
        header = manifest_header(plan, section)
        if any(manifest.get(key) != value for key, value in header.items()):
            return None
        load_partition(source, transform=False, verify=True)
    except DataError as err:
        log.warning("not reusing %s: %s", source, err)
        return None
    (out_dir / "clients").mkdir(parents=True, exist_ok=True)
    names = [f"clients/{entry['file']}" for entry in manifest["clients"]] + [HEATMAP, MANIFEST]
    for name in names:  # the manifest last: a directory with a manifest is complete
        if (source / name).is_file():
            link_file(source / name, out_dir / name)
    return manifest


def format_classes(classes: tuple[int, ...] | None, limit: int = 12) -> str:
    """Write held classes compactly: "0, 3, 7", runs as "0-9", scattered many as "37 classes".

    >>> format_classes((0, 1, 2, 3, 7))
    '0-3, 7'
    """
    if classes is None:
        return "—"
    runs: list[list[int]] = []
    for value in classes:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    if len(runs) > limit:
        return f"{len(classes)} classes"
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run))
                     for run in runs)
