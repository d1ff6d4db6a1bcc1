"""Stage `partition_data`: split the spec's dataset over clients; write the partition directory."""

import logging
from dataclasses import dataclass
from pathlib import Path

from pflpipe.tracking import NULL_TRACKER, Tracker

log = logging.getLogger(__name__)
#: to_markdown lists at most this many clients (the manifest has them all).
MARKDOWN_ROWS = 200


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

    @classmethod
    def from_manifest(cls, out_dir: Path, manifest: dict) -> "PartitionResult":
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
                   n_assigned=manifest["n_assigned"], clients=clients)

    def to_markdown(self) -> str:
        """Return a per-client table (sizes per split, classes held) under a one-line summary."""
        lines = [f"**partition_data**: {self.dataset}, {self.strategy}, {len(self.clients)} "
                 f"clients, seed {self.seed}; {self.n_assigned:,} of {self.n_samples:,} samples "
                 f"assigned; content hash `{self.content_hash[:16]}`", "",
                 "| client | train | val | test | total | classes |",
                 "|---:|---:|---:|---:|---:|---|"]
        for client in self.clients[:MARKDOWN_ROWS]:
            lines.append(f"| {client.client_id} | {client.n_train} | {client.n_val} | "
                         f"{client.n_test} | {client.n} | {format_classes(client.classes)} |")
        if len(self.clients) > MARKDOWN_ROWS:
            lines.append(f"\n{len(self.clients) - MARKDOWN_ROWS} more clients in manifest.json")
        return "\n".join(lines) + "\n"


def run(spec, seed: int, out_dir: Path, *, tracker: Tracker = NULL_TRACKER) -> PartitionResult:
    """Partition the spec's dataset with `seed` into `out_dir`; log the summary and heatmap."""
    from pflpipe.data import partition_dataset, write_partition
    from pflpipe.data.artifact import HEATMAP, MANIFEST

    plan = partition_dataset(spec, seed)
    manifest = write_partition(plan, spec.partition.model_dump(mode="json"), Path(out_dir))
    result = PartitionResult.from_manifest(Path(out_dir), manifest)
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
