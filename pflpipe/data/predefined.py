"""The `predefined` partition: given per-client train / val / test rows, used exactly.

Rows come from an index file (positions in the pooled dataset) or from the dataset's own
per-client splits (`Pooled.groups` and `Pooled.splits`). They are checked, never repaired: a
position out of range, a row twice in one client, a client without train or test rows, or
validation rows for only some clients are errors naming the client.

Index files:
- `.npz`: arrays `train_<k>`, `val_<k>` (optional) and `test_<k>` for k = 0, 1, …;
- `.json`: `{"clients": [{"train": [...], "val": [...], "test": [...]}, ...]}`, or LEAF-style
  `{"users": [u, ...], "user_data": {u: {"train": [...], ...}}}` (clients in `users` order).
"""

import hashlib
import json
import re
from pathlib import Path

import numpy as np

from pflpipe.data.client_split import SPLITS, ClientIndices, split_client
from pflpipe.data.datasets import Pooled
from pflpipe.errors import DataError

Rows = dict[str, np.ndarray]


def index_file(spec) -> Path:
    """The partition's index file: `partition.path`, relative to `dataset.root` unless absolute."""
    path = Path(spec.partition.path)
    return path if path.is_absolute() else Path(getattr(spec.dataset, "root", ".")) / path


def predefined_clients(spec, pooled: Pooled, labels: np.ndarray | None,
                       rng: np.random.Generator) -> tuple[list[ClientIndices], dict]:
    """Return every client's rows, and what the manifest records (`resolved`).

    Args:
        spec: the spec (its `partition` is a predefined section).
        pooled: the dataset.
        labels: [N] class labels for the stratified `val_from_train` hold-out (None: random).
        rng: the generator of that hold-out.

    """
    section = spec.partition
    if section.path is not None:
        path = index_file(spec)
        clients = read_index_file(path)
        resolved = {"index_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        where = str(path)
    else:
        clients, resolved, where = _own_splits(pooled), {}, f"dataset {pooled.name!r}"
    if section.n_clients is not None and section.n_clients != len(clients):
        raise DataError(f"{where} defines {len(clients)} clients but partition.n_clients is "
                        f"{section.n_clients}; set n_clients: {len(clients)} or omit it")
    _check(clients, pooled.n_samples, where)
    out = []
    for client_id, rows in enumerate(clients):
        if not len(rows["val"]) and section.val_from_train > 0:
            rows = _hold_out(rows, labels, section.val_from_train, rng, client_id)
        out.append(ClientIndices(**rows))
    return out, resolved | {"n_clients": len(out)}


def read_index_file(path: Path) -> list[Rows]:
    """Read per-client row positions from an .npz or .json index file."""
    if not path.is_file():
        raise DataError(f"partition.path: no index file {path}")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return _from_npz({key: data[key] for key in data.files}, path)
        return _from_json(json.loads(path.read_text(encoding="utf-8")), path)
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable index file ({err.__class__.__name__}: {err})") from err


def write_index_file(path: Path, clients: list[ClientIndices]) -> None:
    """Write every client's rows as an .npz index file (`train_<k>`, `val_<k>`, `test_<k>`)."""
    np.savez(path, **{f"{split}_{k}": client[split].astype(np.int64)
                      for k, client in enumerate(clients) for split in SPLITS})


def _from_npz(arrays: dict[str, np.ndarray], path: Path) -> list[Rows]:
    keys = {}
    for key in arrays:
        match = re.fullmatch(r"(train|val|test)_(\d+)", key)
        if not match:
            raise DataError(f"{path}: unexpected array {key!r}; arrays are named train_<k>, "
                            "val_<k> or test_<k> for client k")
        keys[(match.group(1), int(match.group(2)))] = key
    n_clients = 1 + max((k for _, k in keys), default=-1)
    return [{split: _positions(arrays[keys[(split, k)]], path, k, split)
             if (split, k) in keys else np.zeros(0, np.int64) for split in SPLITS}
            for k in range(n_clients)]


def _from_json(content, path: Path) -> list[Rows]:
    if isinstance(content, dict) and "users" in content and "user_data" in content:
        entries = [content["user_data"].get(user) for user in content["users"]]
    elif isinstance(content, dict) and isinstance(content.get("clients"), list):
        entries = content["clients"]
    else:
        raise DataError(f'{path}: expected {{"clients": [...]}} or LEAF-style {{"users": [...], '
                        '"user_data": {...}}')
    out = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"{path}: client {k} must map train / val / test to row lists")
        unknown = sorted(set(entry) - set(SPLITS))
        if unknown:
            raise DataError(f"{path}: client {k} has unknown split(s) {unknown}; use train, val, "
                            "test")
        out.append({split: _positions(np.asarray(entry.get(split, []), dtype=object), path, k,
                                      split) for split in SPLITS})
    return out


def _positions(values: np.ndarray, path: Path, client: int, split: str) -> np.ndarray:
    integers = values.dtype.kind in "iu" or (values.dtype == object and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values))
    if values.ndim != 1 or not integers:
        raise DataError(f"{path}: client {client}'s {split} rows must be a list of integer "
                        "positions")
    return values.astype(np.int64)


def _own_splits(pooled: Pooled) -> list[Rows]:
    if pooled.groups is None or pooled.splits is None:
        raise DataError(f"partition 'predefined' without path needs the dataset's own per-client "
                        f"splits; {pooled.name!r} has none (an arrays file needs 'client' and "
                        "'split' arrays). Give partition.path an index file")
    ids = np.unique(pooled.groups)
    return [{split: np.flatnonzero((pooled.groups == group) & (pooled.splits == code))
             for code, split in enumerate(SPLITS)} for group in ids]


def _check(clients: list[Rows], n_samples: int, where: str) -> None:
    with_val = [k for k, rows in enumerate(clients) if len(rows["val"])]
    if with_val and len(with_val) < len(clients):
        without = [k for k in range(len(clients)) if k not in set(with_val)]
        raise DataError(f"{where}: clients {without[:5]} have no validation rows but others do; "
                        "give every client validation rows or none")
    for k, rows in enumerate(clients):
        for split in ("train", "test"):
            if not len(rows[split]):
                raise DataError(f"{where}: client {k} has no {split} rows")
        every = np.concatenate([rows[split] for split in SPLITS])
        outside = every[(every < 0) | (every >= n_samples)]
        if len(outside):
            raise DataError(f"{where}: client {k} has row {int(outside[0])} outside the "
                            f"dataset's {n_samples:,} rows (0..{n_samples - 1})")
        values, counts = np.unique(every, return_counts=True)
        if (counts > 1).any():
            raise DataError(f"{where}: client {k} lists row {int(values[counts > 1][0])} more than "
                            "once (within or across its splits)")


def _hold_out(rows: Rows, labels: np.ndarray | None, fraction: float,
              rng: np.random.Generator, client_id: int) -> Rows:
    """Move `fraction` of a client's train rows to validation; the rest keep their order."""
    held = split_client(rows["train"], labels, fraction, 0.0, rng, client_id)
    keep = ~np.isin(rows["train"], held.val)
    return {"train": rows["train"][keep], "val": held.val, "test": rows["test"]}
