"""Load the dataset a spec names into one pooled array pair, before any split.

Samples keep their raw dtype (uint8 images as [N, C, H, W], float32 features as [N, d]); the
`Transform` says how `load_partition` turns them into float32 inputs: (x · scale − mean) / std,
mean and std per channel (or one value for all), as the dataset's `normalization` asks.
"""

import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pflpipe.errors import DataError

log = logging.getLogger(__name__)

#: ε of `per_feature` normalisation, (x − μ)/(σ + ε) (the FedProx MNIST generator's 0.001).
FEATURE_EPS = 1e-3


@dataclass(frozen=True)
class Transform:
    """x_float = (x · scale − mean) / std, with mean/std per channel (axis 1) or one value."""

    scale: float = 1.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    per_feature: bool = False   # mean and std per feature, from the partition's training rows

    def to_json(self) -> dict:
        """Return the manifest's `transform` entry (`per_feature` only where it is set)."""
        out = {key: list(value) if isinstance(value, tuple) else value
               for key, value in asdict(self).items()}
        if not self.per_feature:
            del out["per_feature"]
        return out


@dataclass(frozen=True, eq=False)
class Pooled:
    """A dataset pooled over its official subsets, ready to split.

    Attributes:
        name: the spec's dataset name.
        x: [N, ...] samples in stored dtype (possibly a strided view; never copied per client).
        y: [N] int64 labels, or float32 targets for a regression task.
        n_classes: number of classes (None for regression).
        task: "classification" or "regression".
        transform: how stored samples become float32 inputs.
        fingerprint: sha256 of the samples, labels and groups.
        groups: [N] int64 natural client of every sample, if the data has groups.
        superclass: [n_classes] superclass of every class, where the data defines one.
        splits: [N] int8 split of every sample (0 train, 1 val, 2 test), if the data gives its
            own per-client splits (the `predefined` partition without an index file).

    """

    name: str
    x: np.ndarray
    y: np.ndarray
    n_classes: int | None
    task: str
    transform: Transform
    fingerprint: str
    groups: np.ndarray | None = None
    superclass: np.ndarray | None = None
    splits: np.ndarray | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample."""
        return tuple(int(size) for size in self.x.shape[1:])

    @property
    def n_samples(self) -> int:
        """Number of pooled samples."""
        return int(self.x.shape[0])


def load_pooled(spec, rng: np.random.Generator) -> Pooled:
    """Load (or generate, with `rng`) the spec's dataset and pool it."""
    section = spec.dataset
    if getattr(section, "source", None):
        _fetch(section.source, Path(section.root), spec.storage)
    if section.name in ("synthetic", "gaussian"):
        return _generated(section, spec.partition.n_clients, rng)
    if section.name == "digits":
        return _digits(section)
    if section.name == "arrays":
        return _arrays(section)
    if section.name == "client_files":
        from pflpipe.data.client_files import load_client_files

        x, y, groups, splits = load_client_files(section)
        return _labelled(section, "client_files", f"{section.root}/{section.path}", x, y,
                         groups=groups, splits=splits)
    from pflpipe.data.vision import NORMALISATION, load_vision

    partition = spec.partition
    wants_groups = (partition.strategy == "concept_drift"
                    and getattr(partition, "groups", None) in (None, 20))
    x, y, superclass = load_vision(section, superclasses=wants_groups)
    from pflpipe.spec.dataset import n_classes_of

    transform = normalization(section, x, 1 / 255, published=NORMALISATION[section.name])
    return _pooled(section.name, x, y, n_classes_of(section), transform, superclass=superclass)


def normalization(section, x: np.ndarray, scale: float, *,
                  published: tuple[list[float], list[float]] | None = None) -> Transform:
    """The `Transform` a dataset section's `normalization` asks for, on samples `x`.

    `standard` uses the `published` per-channel mean and std when given, else the samples' own
    (per channel of [N, C, ...] samples, per feature of [N, d] ones).
    """
    choice = getattr(section, "normalization", "auto")
    if choice == "auto":
        choice = "standard" if x.dtype == np.uint8 else "none"
    if choice == "none":
        return Transform()
    if choice == "scale":
        return Transform(scale)
    if choice == "per_feature":   # its statistics need the split (`feature_stats`)
        return Transform(scale, per_feature=True)
    if choice == "standard":
        mean, std = published if published is not None else channel_stats(x, scale)
        return Transform(scale, tuple(mean), tuple(std))
    channels = x.shape[1] if x.ndim > 1 else 1
    if len(choice.mean) not in (1, channels):
        raise DataError(f"dataset.normalization: {len(choice.mean)} mean/std values for samples "
                        f"of {channels} channels; give 1 or {channels}")
    return Transform(scale, tuple(choice.mean), tuple(choice.std))


def channel_stats(x: np.ndarray, scale: float, chunk: int = 4096
                  ) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of x · scale, computed in float64 chunks.

    >>> channel_stats(np.array([[[0, 2]], [[4, 6]]], dtype=np.uint8), 0.5)
    ([1.5], [1.118033988749895])
    """
    if x.ndim < 2 or not len(x):
        return [0.0], [1.0]
    axes = (0, *range(2, x.ndim))
    total = np.zeros(x.shape[1])
    squares = np.zeros(x.shape[1])
    for start in range(0, len(x), chunk):
        part = x[start:start + chunk].astype(np.float64) * scale
        total += part.sum(axis=axes)
        squares += (part ** 2).sum(axis=axes)
    count = x.size / x.shape[1]
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0))
    std[std < 1e-12] = 1.0  # a constant channel is centred, not blown up
    return mean.tolist(), std.tolist()


def feature_stats(x: np.ndarray, rows: np.ndarray, scale: float, eps: float = FEATURE_EPS,
                  chunk: int = 4096) -> tuple[list, list]:
    """Per-feature mean μ and σ + ε of x[rows] · scale (population σ), as nested lists.

    The FedProx and pFedMe MNIST generators' (x − μ_pixel)/(σ_pixel + 0.001); `rows` are the
    partition's training rows, so validation and test rows never shape the inputs.

    >>> x = np.array([[0, 4], [2, 4], [4, 4], [100, 100]], dtype=np.uint8)
    >>> feature_stats(x, np.array([0, 1, 2]), 0.5)   # rows 0-2: μ = (1, 2), σ = (√(2/3), 0)
    ([1.0, 2.0], [0.817496580927726, 0.001])
    """
    total = np.zeros(x.shape[1:])
    squares = np.zeros(x.shape[1:])
    for start in range(0, len(rows), chunk):
        part = x[np.sort(rows[start:start + chunk])].astype(np.float64) * scale
        total += part.sum(axis=0)
        squares += (part ** 2).sum(axis=0)
    count = max(len(rows), 1)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0)) + eps
    return mean.tolist(), std.tolist()


def fingerprint(*arrays: np.ndarray | None, chunk: int = 4096) -> str:
    """Return the sha256 of arrays' dtypes, shapes and C-order bytes (read in chunks)."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        for start in range(0, max(len(array), 1), chunk):
            digest.update(np.ascontiguousarray(array[start:start + chunk]).data)
    return digest.hexdigest()


def _pooled(name: str, x: np.ndarray, y: np.ndarray, n_classes: int | None,
            transform: Transform, *, groups: np.ndarray | None = None,
            superclass: np.ndarray | None = None, splits: np.ndarray | None = None) -> Pooled:
    task = "classification" if n_classes is not None else "regression"
    digest = fingerprint(x, y, groups) if splits is None else fingerprint(x, y, groups, splits)
    return Pooled(name=name, x=x, y=y, n_classes=n_classes, task=task, transform=transform,
                  fingerprint=digest, groups=groups, superclass=superclass, splits=splits)


def _generated(section, n_clients: int, rng: np.random.Generator) -> Pooled:
    from pflpipe.data import synthetic

    params = section.model_dump(exclude={"name"})
    if section.name == "gaussian":
        data = synthetic.gaussian(n_clients, rng, **params)
        return _pooled("gaussian", data.x, data.y, None, Transform(), groups=data.groups)
    data = synthetic.synthetic(n_clients, rng, **params)
    return _pooled("synthetic", data.x, data.y, section.n_classes, Transform(), groups=data.groups)


def _digits(section) -> Pooled:
    images, target = digits_arrays()
    x = images.astype(np.uint8)[:, None]  # values 0..16
    return _pooled("digits", x, target.astype(np.int64), 10, normalization(section, x, 1 / 16))


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: the images (1797 × 8 × 8, values 0..16) and labels.

    Read from the CSV scikit-learn ships, as `sklearn.datasets.load_digits` reads it, without
    importing scikit-learn (seconds of a partition_data process); through `load_digits` when
    the file is not where it was.
    """
    import importlib.util

    found = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if found is None:
        raise DataError("the digits dataset needs scikit-learn: pip install scikit-learn")
    path = Path(found.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _arrays(section) -> Pooled:
    from pflpipe.data.files import read_arrays

    path = Path(section.root) / section.path
    if not path.is_file():
        raise DataError(f"dataset 'arrays': no file {path} (dataset.root {section.root!r} + "
                        f"dataset.path {section.path!r}); it must hold arrays x and y")
    arrays = read_arrays(path)
    missing = [key for key in ("x", "y") if key not in arrays]
    if missing:
        raise DataError(f"{path}: missing array(s) {', '.join(missing)}; found "
                        f"{sorted(arrays) or 'none'}. Save x (samples) and y (labels)")
    x, y = arrays["x"], arrays["y"]
    groups = client_ids(arrays["client"], path) if "client" in arrays else None
    splits = split_codes(arrays["split"], path) if "split" in arrays else None
    if splits is not None and groups is None:
        raise DataError(f"{path}: a 'split' array needs a 'client' array too (the split of each "
                        "sample within its client)")
    return _labelled(section, "arrays", path, x, y, groups=groups, splits=splits)


def _labelled(section, name: str, path, x: np.ndarray, y: np.ndarray, *,
              groups: np.ndarray | None = None, splits: np.ndarray | None = None) -> Pooled:
    """Check user samples and labels, shape and normalise them, and pool them."""
    from pflpipe.data.files import check_labels, check_samples

    x = check_samples(path, x)
    lengths = {"x": len(x), "y": len(y) if y.ndim else 0} | (
        {"client": len(groups)} if groups is not None else {})
    lengths |= {"split": len(splits)} if splits is not None else {}
    if y.ndim == 1 and len(set(lengths.values())) > 1:
        raise DataError(f"{path}: arrays differ in length {lengths}; one entry per sample")
    y, n_classes = check_labels(path, y, section.n_classes)
    x = x.reshape(len(x), 1) if x.ndim == 1 else x[:, None] if x.ndim == 3 else x
    transform = normalization(section, x, 1 / 255 if x.dtype == np.uint8 else 1.0)
    return _pooled(name, x, y, n_classes, transform, groups=groups, splits=splits)


def client_ids(values: np.ndarray, path) -> np.ndarray:
    """The natural client of every sample as int64; integers only."""
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise DataError(f"{path}: client must be a 1-D array of integer client ids (got dtype "
                        f"{values.dtype}, shape {values.shape})")
    return values.astype(np.int64)


def split_codes(values: np.ndarray, path) -> np.ndarray:
    """Split of every sample as int8 (0 train, 1 val, 2 test) from codes or names."""
    names = {"train": 0, "val": 1, "test": 2}
    if values.dtype.kind in "US":
        unknown = sorted({str(v) for v in np.unique(values)} - set(names))
        if unknown:
            raise DataError(f"{path}: split names must be train, val or test (got {unknown})")
        return np.array([names[str(v)] for v in values], dtype=np.int8)
    if not np.issubdtype(values.dtype, np.integer) or (len(values) and (
            values.min() < 0 or values.max() > 2)):
        raise DataError(f"{path}: split must hold 0 (train), 1 (val) or 2 (test) per sample "
                        f"(got dtype {values.dtype})")
    return values.astype(np.int8)


def _fetch(source: str, root: Path, storage) -> None:
    """Download the objects under an s3:// source into root (through pflpipe.storage)."""
    from pflpipe.storage.s3 import download_uri

    s3 = getattr(storage, "kind", None) == "s3"
    root.mkdir(parents=True, exist_ok=True)
    paths = download_uri(source, root, endpoint_url=storage.endpoint_url if s3 else None,
                         region=storage.region if s3 else None,
                         max_attempts=storage.max_attempts if s3 else 5)
    log.info("fetched %d file(s) from %s into %s", len(paths), source, root)
