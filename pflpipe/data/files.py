"""Read data files safely and check what they hold, with errors naming the file and the problem.

Nothing here unpickles an object: .npz files load with ``allow_pickle=False``, .pt files with
``torch.load(weights_only=True)``. A refused file is reported in our words; numpy's and torch's
advice to load it "unsafely" or with ``weights_only=False`` is never passed on.
"""

import re
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from pflpipe.errors import DataError

#: What numpy's and torch's readers raise on damaged, truncated or foreign bytes: anything, since
#: they parse untrusted input (torch alone raised IndexError, struct.error and
#: UnpicklingError on random bytes). Nothing of ours runs inside these `try` blocks.
_READ_ERRORS = Exception
_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def own_storage(tensor):
    """`tensor` detached on the CPU, holding its own elements only (a copy when it is a view).

    torch.save writes a view's whole storage: a client's slice of the engine's stacked
    [C, ...] tensors would carry every client's weights, and C such files C² of them.

    >>> import torch
    >>> stacked = torch.zeros(100, 60)
    >>> own_storage(stacked[3]).untyped_storage().nbytes()
    240
    >>> own_storage(stacked) is stacked
    True
    """
    import torch

    tensor = tensor.detach().cpu()
    if tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size():
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor


def own_state(state_dict: dict) -> dict:
    """A state_dict (or a dict of them) whose tensors hold their own elements only."""
    return {key: own_state(value) if isinstance(value, dict) else own_storage(value)
            for key, value in state_dict.items()}


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Read the arrays of an .npz file or of a .pt dict of tensors (numbers, lists) by name."""
    path = Path(path)
    if path.suffix != ".npz":
        data = load_tensors(path, "a dict of tensors x, y")
        if not isinstance(data, dict):
            raise DataError(f"{path}: a .pt file must hold a dict of tensors x, y (got "
                            f"{type(data).__name__})")
        return {str(key): _as_array(path, key, value) for key, value in data.items()}
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise DataError(f"{path}: holds one bare array, not an .npz archive of named "
                            "arrays; save it with np.savez(path, x=..., y=...)")
        with data:
            return {key: _member(path, data, key) for key in data.files}
    except DataError:
        raise
    except _READ_ERRORS as err:
        raise DataError(f"{path}: not a readable .npz archive ({_npz_reason(err)}); write it "
                        "again with np.savez(path, x=..., y=...)") from None


def load_tensors(path, what: str, map_location="cpu", name: str | None = None, *,
                 mmap: bool = False):
    """Return ``torch.load(path, weights_only=True)``; a refused or damaged file is a DataError.

    `path` may be a file object; `name` then says in errors where its bytes came from. With
    `mmap` (a file's path), the tensors are mapped from the file, not read into memory.
    """
    import torch

    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says it
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True,
                              mmap=mmap)
    except _READ_ERRORS as err:
        found = _GLOBAL.search(str(err))
        source = path if hasattr(path, "read") else Path(path)
        # torch.save's archive with an object its safe loader cannot even parse (a pickle
        # protocol other than torch's own 2) is named by the object, as one it can parse is
        inside = None if found else pickled_object(source, in_archive=True)
        pickled = None if found or inside else pickled_object(source)
        path = name or path
        if found or inside:
            held = found.group(1) if found else inside
            raise DataError(f"{path}: holds a Python object ({held}), not only tensors and "
                            f"numbers; pflpipe reads {what} (saved with torch.save) and never "
                            "unpickles objects") from None
        if pickled:
            raise DataError(f"{path}: a plain Python pickle holding an object ({pickled}), not a "
                            f"torch.save file; pflpipe reads {what} saved with torch.save and "
                            "never unpickles objects") from None
        kind = _magic(source)
        if kind == "npy":
            raise DataError(f"{path}: is numpy's .npy file, not a torch.save file; give {what} "
                            "saved with torch.save, or an .npz (np.savez(path, x=..., y=...))"
                            ) from None
        if "Unsupported operand" in str(err):
            written = ("a torch.save archive" if kind == "zip" else "a plain Python pickle")
            raise DataError(f"{path}: {written} with a pickle protocol torch's safe loader does "
                            f"not read; save {what} again with torch.save and its default protocol "
                            "(no pickle_protocol argument)") from None
        raise DataError(f"{path}: not a readable torch file (damaged, truncated or not written by "
                        f"torch.save); expected {what}") from None


def pickled_object(path, max_ops: int = 100_000, in_archive: bool = False,
                   skip: tuple[str, ...] = ()) -> str | None:
    """The first class or function a plain pickle file refers to, read without unpickling.

    `path` may be a binary file object (a checkpoint store's bytes). `pickletools.genops` only
    parses the opcodes; None when the file is no pickle (a zip archive of torch.save, random
    bytes) or refers to no object. With `in_archive`, the pickle inside a torch.save archive
    (its ``data.pkl``) is read instead, and a file that is no such archive gives None; there,
    what torch.save itself refers to (``skip``: torch's tensors) is not an object.
    """
    import contextlib
    import io
    import itertools
    import pickletools
    import zipfile

    try:
        opened = contextlib.nullcontext(path) if hasattr(path, "read") else open(path, "rb")
        with opened as handle:
            handle.seek(0)
            if (handle.read(2) == b"PK") != in_archive:  # torch.save's zip format or not
                return None
            handle.seek(0)
            if in_archive:
                with zipfile.ZipFile(handle) as archive:
                    member = next(info for info in archive.infolist()
                                  if info.filename.endswith("data.pkl"))
                    if member.file_size > 64 * 2**20:
                        return None
                    return pickled_object(io.BytesIO(archive.read(member)), max_ops,
                                          skip=("torch.", "collections.OrderedDict"))
            strings: list[str] = []
            for op, arg, _ in itertools.islice(pickletools.genops(handle), max_ops):
                found = (str(arg).replace(" ", ".") if op.name in ("GLOBAL", "INST") else
                         f"{strings[-2]}.{strings[-1]}" if op.name == "STACK_GLOBAL"
                         and len(strings) >= 2 else None)
                if found and not found.startswith(skip):
                    return found
                if isinstance(arg, str):
                    strings.append(arg)
    except Exception:  # noqa: BLE001 - not a pickle: the caller's message stands
        return None
    return None


def _magic(path) -> str | None:
    """What a file's first bytes say it is: "zip" (torch.save), "npy" (numpy), else None."""
    import contextlib

    try:
        opened = contextlib.nullcontext(path) if hasattr(path, "read") else open(path, "rb")
        with opened as handle:
            handle.seek(0)
            head = handle.read(6)
    except OSError:
        return None
    return "zip" if head[:2] == b"PK" else "npy" if head == b"\x93NUMPY" else None


def check_samples(path: Path, x: np.ndarray) -> np.ndarray:
    """Return samples x [n, ...] as stored (uint8) or float32; reject what cannot be features."""
    if x.ndim == 0:
        raise DataError(f"{path}: x is a single value (a 0-d array); expected one row per sample")
    if x.dtype.kind not in "biuf":
        raise DataError(f"{path}: x has dtype {x.dtype} ({_kind(x)}); samples must be real numbers")
    if x.ndim > 4:
        raise DataError(f"{path}: x has shape {x.shape}; expected [n, d] features, [n, H, W] or "
                        "[n, C, H, W] images")
    if len(x) == 0:
        raise DataError(f"{path}: x holds no samples")
    if x.dtype == np.uint8:
        return x
    with np.errstate(over="ignore"):  # values beyond float32's range become inf, caught below
        x = x.astype(np.float32)
    rows = x.reshape(len(x), -1)
    finite = np.concatenate([np.isfinite(rows[start:start + 4096]).all(axis=1)  # bounded memory
                             for start in range(0, len(rows), 4096)])
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise DataError(
            f"{path}: x holds NaN or infinite values (or values beyond float32's range) in "
            f"{len(bad):,} of {len(x):,} samples, first in sample {int(bad[0])}; remove or "
            "impute them: pflpipe does not repair data, and training on them fails")
    return x


def check_labels(path: Path, y: np.ndarray, n_classes: int | None = None) -> tuple[np.ndarray,
                                                                                    int]:
    """Return int64 labels y [n] and the number of classes; reject what cannot be labels."""
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise DataError(f"{path}: y must be a 1-D array of integer labels 0..n_classes-1 (got "
                        f"dtype {y.dtype}, shape {y.shape}{_low(y)})")
    if not n_classes and len(y):
        check_inferred_classes(path, y)
    n_classes = n_classes or (int(y.max()) + 1 if len(y) else 0)
    if len(y) and y.max() >= n_classes:
        raise DataError(f"{path}: label {int(y.max())} is out of range for dataset.n_classes = "
                        f"{n_classes}; labels must be 0..{n_classes - 1}")
    return y.astype(np.int64), n_classes


#: Classes that may be absent from pooled labels before the inferred class count is implausible.
MAX_UNSEEN_CLASSES = 10


def check_inferred_classes(path: Path, y: np.ndarray) -> None:
    """Reject pooled labels whose inferred class count (largest label + 1) is implausible.

    Labels that are ids (``{3, 1017, 99999}``) rather than class indices would give a model head
    of 100,000 classes, almost all never seen: more absent classes than present ones (and more
    than `MAX_UNSEEN_CLASSES`), or more classes than samples, is an error naming the numbers.
    A declared ``dataset.n_classes`` is taken as it is.
    """
    inferred, present = int(y.max()) + 1, len(np.unique(y))
    unseen = inferred - present
    if unseen > max(present, MAX_UNSEEN_CLASSES) or (inferred > len(y) and unseen):
        raise DataError(
            f"{path}: the largest label is {inferred - 1:,}, so {inferred:,} classes would be "
            f"inferred, but only {present:,} distinct labels appear in {len(y):,} samples "
            f"({unseen:,} classes never seen); labels must be class indices 0..k-1: relabel "
            "them, or declare dataset.n_classes if the classes really are that many")


def _member(path: Path, data, key: str) -> np.ndarray:
    try:
        return data[key]
    except ValueError as err:
        if "Object arrays" in str(err):
            raise DataError(f"{path}: array {key!r} holds Python objects (dtype object); save "
                            "plain numeric arrays") from None
        raise


def _npz_reason(err: Exception) -> str:
    if isinstance(err, zipfile.BadZipFile | EOFError | zlib.error):
        return "a damaged or truncated zip archive"
    if "pickled" in str(err):
        return "neither a zip archive nor an .npy header"
    return f"{err.__class__.__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def _as_array(path: Path, key, value) -> np.ndarray:
    if hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except ValueError as err:  # ragged lists
        raise DataError(f"{path}: entry {key!r} is not an array ({err})") from None


def _kind(x: np.ndarray) -> str:
    return {"U": "text", "S": "bytes", "O": "Python objects", "c": "complex numbers",
            "M": "dates", "m": "time spans", "V": "raw records"}.get(x.dtype.kind, "not numbers")


def _low(y: np.ndarray) -> str:
    if np.issubdtype(y.dtype, np.integer) and y.size and y.min() < 0:
        return f", smallest label {int(y.min())}"
    return ""
