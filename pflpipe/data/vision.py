"""MNIST, FashionMNIST, EMNIST, CIFAR-10 and CIFAR-100 through torchvision's dataset classes.

Files are read from torchvision's layout under the spec's `root`; gzipped IDX files and a CIFAR
archive (.tar.gz) lying in the right place are extracted first. CIFAR's batches are Python pickles,
and unpickling a file can run code from it: they (and the archive) must match the official md5
checksums before they are opened, unless `dataset.verify_checksums` is false. IDX files are read
as plain bytes. Nothing is downloaded unless `dataset.allow_download` is true.
"""

import gzip
import hashlib
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np

from pflpipe.errors import DataError

#: (mean, std) per channel of the standard normalisations, on [0, 1] pixels.
NORMALISATION = {
    "mnist": ([0.1307], [0.3081]),
    "fashion_mnist": ([0.2860], [0.3530]),
    "emnist": ([0.1751], [0.3332]),
    "cifar10": ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
    "cifar100": ([0.5071, 0.4865, 0.4409], [0.2673, 0.2564, 0.2762]),
}
_MNIST_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "emnist": "EMNIST"}
_CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


def load_vision(section, *, superclasses: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Load and pool the official subsets a dataset section asks for.

    Args:
        section: the spec's dataset section.
        superclasses: also read CIFAR-100's coarse labels (a second pass over the pickles).

    Returns:
        x [N, C, H, W] uint8 (a view where possible), y [N] int64, and, for CIFAR-100 when asked,
        the superclass [100] of every class (None otherwise).

    """
    root = Path(section.root)
    subsets = ("train", "test") if section.subsets == "both" else (section.subsets,)
    missing = [path for subset in subsets for path in _prepare(section, root, subset)]
    if missing and section.allow_download:
        _download(section, root)
        missing = [path for subset in subsets for path in _prepare(section, root, subset)]
    if missing:
        raise DataError(_missing_message(section, root, missing))
    if section.name in _CIFAR_FOLDERS and section.verify_checksums:
        for subset in subsets:
            _verify(section, root, subset)
    parts = [_read(section, root, subset == "train") for subset in subsets]
    x = np.concatenate([part[0] for part in parts]) if len(parts) > 1 else parts[0][0]
    y = np.concatenate([part[1] for part in parts]).astype(np.int64)
    if section.name == "emnist":
        x = x.transpose(0, 1, 3, 2)  # EMNIST's IDX files store images transposed
        y = y - 1 if section.split == "letters" else y  # letters are labelled 1..26
    superclass = None
    if superclasses and section.name == "cifar100":
        superclass = _cifar100_superclasses(root, subsets)
    return x, y, superclass


def expected_files(section, subset: str) -> list[str]:
    """Return the files (relative to root) torchvision reads for one subset."""
    if section.name in _CIFAR_FOLDERS:
        cls = _torchvision_class(section.name)
        names = [name for name, _ in (cls.train_list if subset == "train" else cls.test_list)]
        return [f"{cls.base_folder}/{name}" for name in [*names, cls.meta["filename"]]]
    prefix = "train" if subset == "train" else "t10k"
    if section.name == "emnist":
        prefix = f"emnist-{section.split}-{'train' if subset == 'train' else 'test'}"
    folder = _MNIST_FOLDERS[section.name]
    return [f"{folder}/raw/{prefix}-{kind}-idx{dims}-ubyte"
            for kind, dims in (("images", 3), ("labels", 1))]


def _prepare(section, root: Path, subset: str) -> list[str]:
    """Extract gzipped IDX files or a CIFAR archive found in place; return what is still missing."""
    files = expected_files(section, subset)
    missing = [name for name in files if not (root / name).is_file()]
    try:
        for name in list(missing):
            packed = root / f"{name}.gz"
            if packed.is_file():
                with gzip.open(packed, "rb") as source, open(root / name, "wb") as target:
                    shutil.copyfileobj(source, target)
                missing.remove(name)
        cls = _torchvision_class(section.name)
        archive = root / getattr(cls, "filename", "")
        if missing and section.name in _CIFAR_FOLDERS and archive.is_file():
            if section.verify_checksums:
                _check_md5(section, archive, cls.tgz_md5)
            with tarfile.open(archive) as tar:  # "data": no member lands outside root
                tar.extractall(root, filter="data")
            missing = [name for name in files if not (root / name).is_file()]
    except (OSError, EOFError, tarfile.TarError) as err:
        raise DataError(f"dataset {section.name!r}: cannot unpack the files found under {root} "
                        f"({err.__class__.__name__}: {err}); replace a damaged archive, unpack it "
                        "yourself, or make the directory writable") from err
    return missing


def _verify(section, root: Path, subset: str) -> None:
    """Check one subset's CIFAR pickles against torchvision's official md5 checksums."""
    cls = _torchvision_class(section.name)
    listed = (cls.train_list if subset == "train" else cls.test_list)
    for name, md5 in [*listed, (cls.meta["filename"], cls.meta["md5"])]:
        _check_md5(section, root / cls.base_folder / name, md5)


def _check_md5(section, path: Path, expected: str) -> None:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise DataError(
            f"dataset {section.name!r}: {path} is not the official file (md5 "
            f"{digest.hexdigest()}, expected {expected}). CIFAR files are Python pickles, and "
            "loading a pickle runs any code it holds, so pflpipe opens only the official ones. "
            "Replace it with the official file (or delete it and set dataset.allow_download: "
            "true); set dataset.verify_checksums: false only for files you made or trust")


def _download(section, root: Path) -> None:
    cls = _torchvision_class(section.name)
    kwargs = {"split": section.split} if section.name == "emnist" else {}
    try:
        for train in (True, False):
            cls(str(root), train=train, download=True, **kwargs)
    except (OSError, RuntimeError) as err:  # network errors and checksum failures
        raise DataError(f"dataset {section.name!r}: download into {root} failed: {err}") from err


def _read(section, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    cls = _present_only(_torchvision_class(section.name))
    kwargs = {"split": section.split} if section.name == "emnist" else {}
    try:
        data = cls(str(root), train=train, **kwargs)
    except (OSError, RuntimeError, ValueError, TypeError, KeyError, pickle.UnpicklingError,
            AssertionError) as err:
        kind = "pickled batches" if section.name in _CIFAR_FOLDERS else "IDX files"
        raise DataError(f"dataset {section.name!r}: cannot read the {'train' if train else 'test'}"
                        f" files under {root} ({err.__class__.__name__}: {err}); they are not "
                        f"{kind} in torchvision's format. Replace them with the official files "
                        "(or delete them and set dataset.allow_download: true)") from err
    if section.name in _CIFAR_FOLDERS:  # [N, H, W, C] numpy
        return data.data.transpose(0, 3, 1, 2), np.asarray(data.targets)
    return data.data.numpy()[:, None], data.targets.numpy()


def _torchvision_class(name: str):
    from torchvision import datasets

    return {"mnist": datasets.MNIST, "fashion_mnist": datasets.FashionMNIST,
            "emnist": datasets.EMNIST, "cifar10": datasets.CIFAR10,
            "cifar100": datasets.CIFAR100}[name]


def _present_only(cls):
    """Subclass a torchvision dataset so it checks its own subset's files for presence only."""
    if hasattr(cls, "train_list"):  # CIFAR
        def check(self) -> bool:
            names = self.train_list if self.train else self.test_list
            return all((Path(self.root) / self.base_folder / name).is_file() for name, _ in names)

        meta = {**cls.meta, "md5": None}
        return type(cls.__name__, (cls,), {"_check_integrity": check, "meta": meta})

    def exists(self) -> bool:
        return True  # load_vision checked the files; torchvision's own check wants all subsets

    # the same class name keeps torchvision's folder (root/<ClassName>/raw)
    return type(cls.__name__, (cls,), {"_check_exists": exists})


def _cifar100_superclasses(root: Path, subsets: tuple[str, ...]) -> np.ndarray:
    """Read the fine → coarse mapping from the pickled batches' `coarse_labels`."""
    mapping = np.full(100, -1, dtype=np.int64)
    for subset in subsets:
        with open(root / _CIFAR_FOLDERS["cifar100"] / subset, "rb") as handle:
            entry = pickle.load(handle, encoding="latin1")
        mapping[np.asarray(entry["fine_labels"])] = np.asarray(entry["coarse_labels"])
    return mapping


def _missing_message(section, root: Path, missing: list[str]) -> str:
    subsets = ("train", "test") if section.subsets == "both" else (section.subsets,)
    layout = "\n".join(f"  {root}/{name}" for subset in subsets
                       for name in expected_files(section, subset))
    gz = " (IDX files may be gzipped, as .gz)" if section.name not in _CIFAR_FOLDERS else (
        f" (or the archive {root}/{_torchvision_class(section.name).filename})")
    return (f"dataset {section.name!r}: missing {len(missing)} file(s) under {root}: "
            f"{', '.join(missing)}.\nExpected layout{gz}:\n{layout}\n"
            "Put the files there, or set dataset.allow_download: true to fetch them.")
