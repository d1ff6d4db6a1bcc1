"""The partition directory (docs/contracts.md): write it from a plan, load it for training.

```
manifest.json              written last: a directory with a manifest is complete
clients/client_0000.pt     {"train": {"x", "y", "index"}, "val": {...}, "test": {...}}
label_distribution.png     clients × classes heatmap
```
The content hash is the sha256 of every client's tensors (dtype, shape and bytes; client order,
then train/val/test, then x/y/index) followed by the manifest's dataset, partition, resolved and
seed fields as sorted JSON. It does not depend on where the data or the directory lie.
"""

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pflpipe.data.client_split import SPLITS
from pflpipe.data.files import load_tensors
from pflpipe.data.plan import PartitionPlan
from pflpipe.errors import DataError
from pflpipe.layout import (
    CLIENTS,
    HEATMAP_PNG,
    MANIFEST_JSON,
    partition_client_file,
    stale_partition_files,
)

FORMAT = 1
MANIFEST, HEATMAP = MANIFEST_JSON, HEATMAP_PNG
_HASHED = ("dataset", "partition", "resolved", "seed")


@dataclass(frozen=True)
class StoredSplit:
    """One split of one client: x [n, *input_shape] (float32 when transformed), y [n], index [n]."""

    x: "torch.Tensor"  # noqa: F821 - torch is imported lazily
    y: "torch.Tensor"  # noqa: F821
    index: "torch.Tensor"  # noqa: F821

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class ClientData:
    """One client's train, val and test splits."""

    client_id: int
    train: StoredSplit
    val: StoredSplit
    test: StoredSplit

    def split(self, name: str) -> StoredSplit:
        """Return the split called `name` ("train", "val" or "test")."""
        if name not in SPLITS:
            raise KeyError(f"no split {name!r}; splits are {SPLITS}")
        return getattr(self, name)


@dataclass(frozen=True)
class Partition:
    """A loaded partition directory."""

    path: Path
    manifest: dict
    clients: tuple[ClientData, ...]

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return len(self.clients)

    @property
    def n_classes(self) -> int | None:
        """Number of classes of the stored labels (None for regression)."""
        return self.manifest["dataset"]["n_classes"]

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample."""
        return tuple(self.manifest["dataset"]["input_shape"])

    @property
    def task(self) -> str:
        """"classification" or "regression"."""
        return self.manifest["dataset"]["task"]

    @property
    def content_hash(self) -> str:
        """The partition's content hash."""
        return self.manifest["content_hash"]


def write_partition(plan: PartitionPlan, partition: dict, out_dir: Path, *,
                    heatmap: bool | Callable[[dict], object] = True) -> dict:
    """Write the partition directory; gather samples one client at a time. Return the manifest.

    Args:
        plan: the split.
        partition: the spec's partition section as JSON (recorded and hashed).
        out_dir: the directory (created; files of an earlier partition there are replaced).
        heatmap: also draw label_distribution.png; a callable draws it instead, given the
            manifest, before the manifest is written (`partition_data` draws it in a forked
            process that imported matplotlib while this one imported torch).

    """
    import torch

    out_dir = Path(out_dir)
    clients_dir = out_dir / CLIENTS
    clients_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for stale in stale_partition_files(clients_dir):
        stale.unlink()
    header = manifest_header(plan, partition)
    digest = hashlib.sha256()
    width = max(4, len(str(len(plan.clients) - 1)))
    entries = []
    for client_id, indices in enumerate(plan.clients):
        payload = {}
        for split in SPLITS:
            arrays = _gather(plan, indices[split])
            for array in arrays.values():
                _update(digest, array)
            payload[split] = {key: torch.from_numpy(array) for key, array in arrays.items()}
        name = partition_client_file(client_id, width)
        torch.save(payload, clients_dir / name)
        entries.append(_entry(plan, client_id, name))
    digest.update(json.dumps(header, sort_keys=True).encode())
    manifest = {"format": FORMAT, **header, "n_clients": len(plan.clients),
                "n_assigned": plan.n_assigned, "clients": entries,
                "content_hash": digest.hexdigest()}
    if callable(heatmap):
        heatmap(manifest)
    elif heatmap:
        from pflpipe.data.heatmap import draw_heatmap

        draw_heatmap(manifest, plan, out_dir / HEATMAP)
    _write_json(out_dir / MANIFEST, manifest)
    return manifest


def manifest_header(plan: PartitionPlan, partition: dict) -> dict:
    """The manifest fields that, with the seed, decide a partition's content (JSON-equal)."""
    pooled = plan.pooled
    header = {
        "dataset": {"name": pooled.name, "task": pooled.task, "n_classes": plan.n_classes,
                    "input_shape": list(pooled.input_shape), "n_samples": pooled.n_samples,
                    "dtype": str(pooled.x.dtype), "fingerprint": pooled.fingerprint,
                    "transform": _transform(plan)},
        "partition": partition, "resolved": plan.resolved, "seed": plan.seed,
    }
    return json.loads(json.dumps(header))  # as a manifest holds it (tuples become lists)


def _transform(plan: PartitionPlan) -> dict:
    """The manifest's transform; `per_feature` statistics from every client's training rows."""
    transform = plan.pooled.transform
    out = transform.to_json()
    if transform.per_feature:
        from pflpipe.data.datasets import feature_stats

        train = [c["train"] for c in plan.clients]
        rows = np.concatenate(train) if train else np.zeros(0, dtype=np.int64)
        out["mean"], out["std"] = feature_stats(plan.pooled.x, rows, transform.scale)
    return out


def load_partition(path: str | Path, *, transform: bool = True, verify: bool = False
                   ) -> Partition:
    """Load a partition directory.

    Args:
        path: the directory.
        transform: return float32 x = (x · scale − mean) / std (else the stored dtype).
        verify: recompute the content hash and fail if it differs from the manifest's.

    Raises:
        DataError: a missing or unreadable manifest or client file, another format, or (with
            `verify`) a content hash that does not match.

    """
    path = Path(path)
    manifest = read_manifest(path)
    digest = hashlib.sha256()
    clients = []
    for entry in manifest["clients"]:
        file = path / CLIENTS / entry["file"]
        stored = load_tensors(file, f"client {entry['client_id']}'s split tensors of a partition")
        splits = {}
        for split in SPLITS:
            tensors = stored[split]
            if verify:
                for key in ("x", "y", "index"):
                    _update(digest, tensors[key].numpy())
            x = tensors["x"]
            if transform:
                x = apply_transform(x, manifest["dataset"]["transform"])
            splits[split] = StoredSplit(x=x, y=tensors["y"], index=tensors["index"])
        clients.append(ClientData(client_id=entry["client_id"], **splits))
    if verify:
        digest.update(json.dumps({key: manifest[key] for key in _HASHED}, sort_keys=True).encode())
        if digest.hexdigest() != manifest["content_hash"]:
            raise DataError(f"partition {path}: content hash {digest.hexdigest()[:16]}… does not "
                            f"match the manifest's {manifest['content_hash'][:16]}…; the files "
                            "were changed after writing. Write the partition again")
    return Partition(path=path, manifest=manifest, clients=tuple(clients))


def read_manifest(path: str | Path) -> dict:
    """Read and check a partition directory's manifest."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} is not a partition directory (no {MANIFEST}); write one with "
                        "`pflpipe split SPEC`") from None
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"{file}: unreadable manifest ({err})") from err
    if manifest.get("format") != FORMAT:
        raise DataError(f"{file}: partition format {manifest.get('format')!r}; this pflpipe reads "
                        f"format {FORMAT}. Write the partition again")
    return manifest


def _gather(plan: PartitionPlan, indices: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": np.ascontiguousarray(plan.pooled.x[indices]),
            "y": np.ascontiguousarray(plan.labels[indices]),
            "index": indices.astype(np.int64)}


def _entry(plan: PartitionPlan, client_id: int, name: str) -> dict:
    indices = plan.clients[client_id]
    entry = {"client_id": client_id, "file": name,
             "n": {split: int(len(indices[split])) for split in SPLITS}}
    if plan.n_classes is None:
        return entry | {"counts": None, "classes": None}
    counts = {split: np.bincount(plan.labels[indices[split]], minlength=plan.n_classes).tolist()
              for split in SPLITS}
    held = np.flatnonzero(np.sum([counts[split] for split in SPLITS], axis=0)).tolist()
    entry |= {"counts": counts, "classes": held}
    if plan.source_classes is not None:
        entry["source_classes"] = plan.source_classes[client_id]
    return entry


def _update(digest, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.data)


def apply_transform(x, transform: dict):
    """Return float32 (x · scale − mean) / std with the manifest's transform."""
    import torch

    mean = torch.tensor(transform["mean"], dtype=torch.float32)
    std = torch.tensor(transform["std"], dtype=torch.float32)
    if transform.get("per_feature"):   # [*input_shape] each, broadcast over the samples
        mean, std = mean.unsqueeze(0), std.unsqueeze(0)
    elif len(mean) > 1:
        shape = (1, len(mean)) + (1,) * (x.dim() - 2)
        mean, std = mean.view(shape), std.view(shape)
    return (x.to(torch.float32) * transform["scale"] - mean) / std


def _write_json(path: Path, data: dict) -> None:
    """Write JSON atomically: readers see the old file or the whole new one."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=1))
    os.replace(temporary, path)
