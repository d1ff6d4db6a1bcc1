"""Read data already split per client, in other tools' layouts (the `client_files` dataset).

| layout | files under root/path | one client's split |
|---|---|---|
| `pfllib` | `train/<k>.npz`, `test/<k>.npz` (optional `val/<k>.npz`) | `data` = {'x', 'y'} |
| `leaf` | `train/*.json`, `test/*.json` (optional `val/*.json`) | `user_data[user]` = {"x", "y"} |
| `flower` | `partition_<k>/train.npz`, `test.npz` (optional `val.npz`) | arrays `x`, `y` |

Every client's splits are pooled client by client (train, val, test), so `Pooled.groups` and
`Pooled.splits` give back exactly the files' clients and splits, rows in file order.

PFLlib stores each split as a pickled dict of arrays. It is read with an unpickler that builds
only NumPy arrays, dicts and lists: a file that asks for anything else is refused, never run.
"""

import json
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np

from pflpipe.data.client_split import SPLITS
from pflpipe.data.files import read_arrays
from pflpipe.errors import DataError

#: What a PFLlib file's pickle may build (numpy's array reconstruction, under either module name).
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
}
Client = dict[str, tuple[np.ndarray, np.ndarray]]


def load_client_files(section) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read a `client_files` section's clients and pool them.

    Returns:
        x [N, ...], y [N] int, groups [N] int64 (the client) and splits [N] int8 (0 train, 1 val,
        2 test), client-major, then train, val, test, rows in file order.

    """
    root = Path(section.root) / section.path
    if not root.is_dir():
        raise DataError(f"dataset 'client_files': no directory {root} (dataset.root "
                        f"{section.root!r} + dataset.path {section.path!r})")
    clients = {"pfllib": _pfllib, "leaf": _leaf, "flower": _flower}[section.layout](root)
    if not clients:
        raise DataError(f"{root}: no client files in the {section.layout} layout (see the "
                        "client_files dataset in docs/spec-reference.md)")
    xs, ys, groups, splits = [], [], [], []
    for client_id, client in enumerate(clients):
        for code, split in enumerate(SPLITS):
            if split not in client:
                continue
            x, y = client[split]
            xs.append(x)
            ys.append(y)
            groups.append(np.full(len(y), client_id, dtype=np.int64))
            splits.append(np.full(len(y), code, dtype=np.int8))
    x = _reshape(_stack(xs, root), section.input_shape, root)
    return x, np.concatenate(ys), np.concatenate(groups), np.concatenate(splits)


def _pfllib(root: Path) -> list[Client]:
    clients = []
    while (root / "train" / f"{len(clients)}.npz").is_file():
        k = len(clients)
        clients.append({split: _pfllib_file(root / split / f"{k}.npz")
                        for split in SPLITS if (root / split / f"{k}.npz").is_file()})
        if "test" not in clients[-1]:
            raise DataError(f"{root}: client {k} has train/{k}.npz but no test/{k}.npz")
    return clients


def _pfllib_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read `data` = {'x', 'y'} from a PFLlib .npz without running arbitrary pickles."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open("data.npy") as handle:
            version = np.lib.format.read_magic(handle)
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            _, _, dtype = header(handle)
            if not dtype.hasobject:
                raise DataError(f"{path}: 'data' is a plain array; PFLlib files hold a dict "
                                "{'x': ..., 'y': ...}")
            data = _ArrayUnpickler(handle).load()
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - parsing untrusted bytes raises anything
        raise DataError(f"{path}: not a PFLlib client file ({err.__class__.__name__}: {err}); "
                        "it must be an .npz holding data = {'x': array, 'y': array}") from err
    data = data.item() if isinstance(data, np.ndarray) and data.shape == () else data
    if not isinstance(data, dict) or not {"x", "y"} <= set(data):
        raise DataError(f"{path}: 'data' must be a dict with keys x and y")
    return _arrays_of(np.asarray(data["x"]), np.asarray(data["y"]), path)


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only NumPy arrays, "
                                     "dicts and lists are read")


def _leaf(root: Path) -> list[Client]:
    by_split = {split: _leaf_users(root / split) for split in SPLITS if (root / split).is_dir()}
    train, test = by_split.get("train", {}), by_split.get("test", {})
    missing = [user for user in train if user not in test]
    if missing:
        raise DataError(f"{root}: user(s) {missing[:5]} have train data but no test data")
    return [{split: users[user] for split, users in by_split.items() if user in users}
            for user in train]


def _leaf_users(directory: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    users: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
            for user in content["users"]:
                entry = content["user_data"][user]
                users[user] = _arrays_of(np.asarray(entry["x"]), np.asarray(entry["y"]), path)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DataError(f"{path}: not a LEAF file ({err.__class__.__name__}: {err}); it must "
                            'hold {"users": [...], "user_data": {user: {"x", "y"}}}') from err
    return users


def _flower(root: Path) -> list[Client]:
    found = {}
    for directory in root.glob("partition_*"):
        if (match := re.fullmatch(r"partition_(\d+)", directory.name)) and directory.is_dir():
            found[int(match.group(1))] = directory
    if sorted(found) != list(range(len(found))):
        raise DataError(f"{root}: partition folders must be numbered 0..{len(found) - 1} "
                        f"(got {sorted(found)[:10]})")
    clients = []
    for k in range(len(found)):
        client = {}
        for split in SPLITS:
            path = found[k] / f"{split}.npz"
            if path.is_file():
                data = read_arrays(path)
                if "x" not in data or "y" not in data:
                    raise DataError(f"{path}: needs arrays x and y (found {sorted(data)})")
                client[split] = _arrays_of(data["x"], data["y"], path)
        if not {"train", "test"} <= set(client):
            raise DataError(f"{found[k]}: needs train.npz and test.npz")
        clients.append(client)
    return clients


def _arrays_of(x: np.ndarray, y: np.ndarray, path: Path) -> tuple[np.ndarray, np.ndarray]:
    if len(x) != len(y):
        raise DataError(f"{path}: x has {len(x)} rows but y has {len(y)}")
    if x.dtype == object or (len(y) and not np.issubdtype(y.dtype, np.integer)):
        raise DataError(f"{path}: x must be a numeric array and y integer labels (got dtypes "
                        f"{x.dtype}, {y.dtype})")
    return x, y.astype(np.int64)


def _stack(xs: list[np.ndarray], root: Path) -> np.ndarray:
    shapes = {x.shape[1:] for x in xs if len(x)}
    if len(shapes) > 1:
        raise DataError(f"{root}: samples of different shapes {sorted(shapes)[:3]}; every client "
                        "file must hold samples of one shape")
    dtype = np.uint8 if all(x.dtype == np.uint8 for x in xs) else np.float32
    return np.concatenate([x.astype(dtype, copy=False) for x in xs])


def _reshape(x: np.ndarray, shape: list[int] | None, root: Path) -> np.ndarray:
    if shape is None:
        return x
    if int(np.prod(shape)) != int(np.prod(x.shape[1:])):
        raise DataError(f"{root}: samples of shape {list(x.shape[1:])} cannot be reshaped to "
                        f"dataset.input_shape {shape}")
    return x.reshape(len(x), *shape)
