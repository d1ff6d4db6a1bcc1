"""Dataset loaders on small files written in the real formats and layouts torchvision reads."""

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from pflpipe.data.datasets import Transform, load_pooled
from pflpipe.errors import DataError
from pflpipe.spec import parse_spec

RNG = np.random.default_rng(0)


def make_spec(dataset: str, partition: str = "{strategy: iid, n_clients: 2, min_samples: 3}"):
    return parse_spec(f"experiment: {{name: t}}\ndataset: {dataset}\npartition: {partition}\n")


def write_idx(path: Path, array: np.ndarray, gzipped: bool = False) -> None:
    """Write an IDX (ubyte) file: magic 0x0000 08 <ndim>, big-endian dims, then the bytes."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += b"".join(struct.pack(">i", size) for size in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gzipped:
        Path(f"{path}.gz").write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


def write_mnist(root: Path, folder: str, n_train: int, n_test: int, prefix=("train", "t10k"),
                gzip_train: bool = False):
    images = RNG.integers(0, 256, (n_train + n_test, 28, 28), dtype=np.uint8)
    labels = np.arange(n_train + n_test, dtype=np.uint8) % 10
    raw = root / folder / "raw"
    write_idx(raw / f"{prefix[0]}-images-idx3-ubyte", images[:n_train], gzip_train)
    write_idx(raw / f"{prefix[0]}-labels-idx1-ubyte", labels[:n_train], gzip_train)
    if n_test:
        write_idx(raw / f"{prefix[1]}-images-idx3-ubyte", images[n_train:])
        write_idx(raw / f"{prefix[1]}-labels-idx1-ubyte", labels[n_train:])
    return images, labels


# The test files are home-made pickles, not the official ones.
UNCHECKED = "verify_checksums: false"


def write_pickle(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(data))


# ---- MNIST family (IDX) ------------------------------------------------------------------------

def test_mnist_pools_train_and_test_from_gzipped_and_plain_idx(tmp_path):
    images, labels = write_mnist(tmp_path, "MNIST", 6, 4, gzip_train=True)

    pooled = load_pooled(make_spec(f"{{name: mnist, root: {tmp_path}}}"), RNG)

    assert pooled.x.shape == (10, 1, 28, 28) and pooled.x.dtype == np.uint8
    assert np.array_equal(pooled.x[:, 0], images)
    assert pooled.y.tolist() == labels.tolist() and pooled.y.dtype == np.int64
    assert pooled.n_classes == 10 and pooled.input_shape == (1, 28, 28)
    assert pooled.transform.scale == pytest.approx(1 / 255)
    assert pooled.transform.mean == (0.1307,) and pooled.transform.std == (0.3081,)


def test_mnist_train_subset_needs_only_train_files(tmp_path):
    images, _ = write_mnist(tmp_path, "MNIST", 5, 0)

    pooled = load_pooled(make_spec(f"{{name: mnist, root: {tmp_path}, subsets: train}}"), RNG)

    assert np.array_equal(pooled.x[:, 0], images)


def test_fashion_mnist_reads_its_own_folder(tmp_path):
    images, _ = write_mnist(tmp_path, "FashionMNIST", 3, 3)

    pooled = load_pooled(make_spec(f"{{name: fashion_mnist, root: {tmp_path}}}"), RNG)

    assert np.array_equal(pooled.x[:, 0], images)
    assert pooled.transform.mean == (0.2860,)


def test_emnist_letters_are_transposed_and_labelled_from_zero(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    image = np.arange(28 * 28, dtype=np.uint8).reshape(1, 28, 28)
    for subset in ("train", "test"):
        write_idx(raw / f"emnist-letters-{subset}-images-idx3-ubyte", image)
        write_idx(raw / f"emnist-letters-{subset}-labels-idx1-ubyte", np.array([26], np.uint8))

    pooled = load_pooled(make_spec(f"{{name: emnist, split: letters, root: {tmp_path}}}"), RNG)

    assert np.array_equal(pooled.x[0, 0], image[0].T)
    assert pooled.y.tolist() == [25, 25] and pooled.n_classes == 26


def test_missing_mnist_files_name_files_layout_and_fix(tmp_path):
    with pytest.raises(DataError) as info:
        load_pooled(make_spec(f"{{name: mnist, root: {tmp_path}}}"), RNG)

    message = str(info.value)
    assert "missing 4 file(s)" in message
    assert "MNIST/raw/train-images-idx3-ubyte" in message
    assert "MNIST/raw/t10k-labels-idx1-ubyte" in message
    assert "dataset.allow_download: true" in message


# ---- CIFAR (pickled batches) -------------------------------------------------------------------

def test_cifar10_pools_five_train_batches_then_test(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    data = RNG.integers(0, 256, (12, 3072), dtype=np.uint8)
    labels = [int(v) for v in np.arange(12) % 10]
    for b in range(5):
        write_pickle(folder / f"data_batch_{b + 1}",
                     {"data": data[2 * b:2 * b + 2], "labels": labels[2 * b:2 * b + 2]})
    write_pickle(folder / "test_batch", {"data": data[10:], "labels": labels[10:]})
    write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})

    pooled = load_pooled(make_spec(f"{{name: cifar10, root: {tmp_path}, {UNCHECKED}}}"), RNG)

    assert pooled.x.shape == (12, 3, 32, 32)
    assert np.array_equal(pooled.x[7], data[7].reshape(3, 32, 32))
    assert pooled.y.tolist() == labels
    assert len(pooled.transform.mean) == 3


def test_cifar100_reads_coarse_labels_for_concept_drift(tmp_path):
    folder = tmp_path / "cifar-100-python"
    fine = np.array([0, 1, 2, 3, 4, 5])
    coarse = np.array([4, 1, 14, 8, 0, 6])  # CIFAR-100's coarse labels of fine classes 0-5
    for subset, part in (("train", slice(0, 4)), ("test", slice(4, 6))):
        write_pickle(folder / subset, {
            "data": RNG.integers(0, 256, (len(fine[part]), 3072), dtype=np.uint8),
            "fine_labels": fine[part].tolist(), "coarse_labels": coarse[part].tolist()})
    write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})

    pooled = load_pooled(make_spec(f"{{name: cifar100, root: {tmp_path}, {UNCHECKED}}}",
                                   "{strategy: concept_drift, n_clients: 2, min_samples: 3}"), RNG)

    assert pooled.y.tolist() == fine.tolist() and pooled.n_classes == 100
    assert pooled.superclass[:6].tolist() == coarse.tolist()


def test_cifar_archive_in_root_is_extracted(tmp_path):
    import tarfile

    staging = tmp_path / "staging" / "cifar-10-batches-py"
    for name in [f"data_batch_{b}" for b in range(1, 6)] + ["test_batch"]:
        write_pickle(staging / name, {"data": np.zeros((1, 3072), np.uint8), "labels": [3]})
    write_pickle(staging / "batches.meta", {"label_names": []})
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(staging, arcname="cifar-10-batches-py")

    pooled = load_pooled(make_spec(f"{{name: cifar10, root: {tmp_path}, {UNCHECKED}}}"), RNG)

    assert pooled.y.tolist() == [3] * 6


class Planted:
    """Unpickling this creates a file: proof that a pickle was opened."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_cifar_batch_without_the_official_checksum_is_refused_unopened(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    marker = tmp_path / "code-ran"
    for name in [f"data_batch_{b}" for b in range(1, 6)] + ["test_batch", "batches.meta"]:
        write_pickle(folder / name, {"data": Planted(marker), "labels": [0]})

    with pytest.raises(DataError) as err:
        load_pooled(make_spec(f"{{name: cifar10, root: {tmp_path}}}"), RNG)

    assert f"{folder / 'data_batch_1'} is not the official file (md5 " in str(err.value)
    assert "expected c99cafc152244af753f735de768cd75f" in str(err.value)
    assert "verify_checksums: false" in str(err.value)
    assert not marker.exists()


def test_cifar_archive_without_the_official_checksum_is_not_extracted(tmp_path):
    import tarfile

    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "x").write_text("x")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "staging" / "x", arcname="cifar-10-batches-py/data_batch_1")

    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz is not the official file"):
        load_pooled(make_spec(f"{{name: cifar10, root: {tmp_path}}}"), RNG)

    assert not (tmp_path / "cifar-10-batches-py").exists()


def test_unchecked_cifar_archive_cannot_write_outside_root(tmp_path):
    import tarfile

    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "evil").write_text("x")
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "evil", arcname="../escaped")

    with pytest.raises(DataError, match="cannot unpack the files found under"):
        load_pooled(make_spec(f"{{name: cifar10, root: {root}, {UNCHECKED}}}"), RNG)

    assert not (tmp_path / "escaped").exists()


def test_missing_cifar_files_mention_archive_and_layout(tmp_path):
    with pytest.raises(DataError, match=r"(?s)cifar-100-python/train.*cifar-100-python.tar.gz"):
        load_pooled(make_spec(f"{{name: cifar100, root: {tmp_path}}}"), RNG)


# ---- user arrays, digits, generators -----------------------------------------------------------

def test_arrays_npz_grey_images_gain_a_channel_and_groups(tmp_path):
    x = RNG.integers(0, 256, (6, 4, 4), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 2, 0, 1, 2]), client=np.array([9] * 6))

    pooled = load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz}}"), RNG)

    assert pooled.x.shape == (6, 1, 4, 4) and pooled.n_classes == 3
    assert pooled.groups.tolist() == [9] * 6
    assert pooled.transform.scale == pytest.approx(1 / 255)


def test_arrays_pt_float_features_become_float32(tmp_path):
    import torch

    torch.save({"x": torch.ones(4, 3, dtype=torch.float64), "y": torch.tensor([0, 1, 1, 0])},
               tmp_path / "d.pt")

    pooled = load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: d.pt}}"), RNG)

    assert pooled.x.dtype == np.float32 and pooled.x.shape == (4, 3)
    assert pooled.transform.scale == 1.0 and pooled.n_classes == 2


@pytest.mark.parametrize(("arrays", "message"), [
    ({"x": np.zeros((3, 2))}, "missing array(s) y"),
    ({"x": np.zeros((3, 2)), "y": np.array([0.0, 1.0, 1.0])}, "integer labels"),
    ({"x": np.zeros((3, 2)), "y": np.array([0, 1])}, "differ in length"),
    ({"x": np.zeros((3, 2)), "y": np.array([0, 1, 5])}, "label 5 is out of range"),
])
def test_arrays_reject_bad_files_naming_the_problem(tmp_path, arrays, message):
    np.savez(tmp_path / "d.npz", **arrays)
    n_classes = ", n_classes: 3" if "5 is out" in message else ""

    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz{n_classes}}}"), RNG)


def test_arrays_missing_file_names_the_path(tmp_path):
    with pytest.raises(DataError, match="no file .*nope.npz"):
        load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: nope.npz}}"), RNG)


def test_digits_are_uint8_images_scaled_by_one_sixteenth():
    pooled = load_pooled(make_spec("{name: digits}"), RNG)

    assert pooled.x.shape == (1797, 1, 8, 8) and pooled.x.dtype == np.uint8
    assert int(pooled.x.max()) == 16 and pooled.transform.scale == 1 / 16


def test_digits_read_from_the_shipped_file_equal_load_digits():
    from sklearn.datasets import load_digits

    from pflpipe.data.datasets import digits_arrays

    images, target = digits_arrays()
    bunch = load_digits()

    assert np.array_equal(images, bunch.images) and images.dtype == bunch.images.dtype
    assert np.array_equal(target, bunch.target) and target.dtype == bunch.target.dtype


def test_gaussian_without_spread_observes_theta0():
    spec = make_spec("{name: gaussian, sigma0_sq: 0, sigma_sq: 1.0e-10, n_min: 3, n_max: 5}",
                     "{strategy: natural, n_clients: 4, min_samples: 3}")

    pooled = load_pooled(spec, np.random.default_rng(0))

    assert pooled.task == "regression" and pooled.n_classes is None
    assert np.allclose(pooled.y, 1.6, atol=1e-3) and np.all(pooled.x == 1)
    assert np.bincount(pooled.groups).min() >= 3 and len(np.unique(pooled.groups)) == 4


def test_synthetic_has_one_group_per_client_and_fedprox_sizes():
    spec = make_spec("{name: synthetic, dimension: 5, n_classes: 3, sigma_samples: 0}",
                     "{strategy: natural, n_clients: 4, min_samples: 3}")

    pooled = load_pooled(spec, np.random.default_rng(0))

    # σ = 0: every size is ⌊e^4⌋ + 50 = 54 + 50
    assert np.bincount(pooled.groups).tolist() == [104] * 4
    assert pooled.x.shape == (416, 5) and pooled.x.dtype == np.float32
    assert set(pooled.y.tolist()) <= {0, 1, 2}


def test_fingerprint_depends_on_content_only(tmp_path):
    x = RNG.integers(0, 256, (6, 4), dtype=np.uint8)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "d.npz", x=x, y=np.arange(6) % 2)

    first, second = (load_pooled(make_spec(f"{{name: arrays, root: {tmp_path / n}, path: d.npz}}"),
                                 RNG) for n in ("a", "b"))

    assert first.fingerprint == second.fingerprint


def test_corrupt_idx_file_is_a_data_error_naming_the_format(tmp_path):
    write_mnist(tmp_path, "MNIST", 2, 2)
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"not an idx file")

    with pytest.raises(DataError, match="not IDX files in torchvision's format"):
        load_pooled(make_spec(f"{{name: mnist, root: {tmp_path}}}"), RNG)


# ---- normalisation (dataset.normalization) -----------------------------------------------------

def test_arrays_uint8_images_get_the_torchvision_datasets_normalisation(tmp_path):
    images, labels = write_mnist(tmp_path, "MNIST", 6, 4)
    np.savez(tmp_path / "same.npz", x=images, y=labels)

    named = load_pooled(make_spec(f"{{name: mnist, root: {tmp_path}}}"), RNG)
    arrays = load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: same.npz}}"), RNG)
    given = load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: same.npz, "
                                  "normalization: {mean: [0.1307], std: [0.3081]}}"), RNG)

    # both standardised, (x / 255 − mean) / std: MNIST's published statistics, the array's own
    scaled = images / 255
    assert named.transform == Transform(1 / 255, (0.1307,), (0.3081,))
    assert arrays.transform.scale == 1 / 255
    assert arrays.transform.mean == pytest.approx((scaled.mean(),))
    assert arrays.transform.std == pytest.approx((scaled.std(),))
    # naming the published statistics gives the torchvision dataset's inputs exactly
    assert given.transform == named.transform and np.array_equal(given.x, named.x)


def test_standard_normalisation_is_per_channel_and_leaves_constant_channels_unscaled(tmp_path):
    x = np.zeros((4, 2, 1, 1), dtype=np.uint8)
    x[:2, 0] = 255  # channel 0: half 0, half 1 after scaling -> mean 0.5, std 0.5
    x[:, 1] = 51    # channel 1: constant 0.2 -> mean 0.2, std 1 (centred, not blown up)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 0, 1]))

    pooled = load_pooled(make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz}}"), RNG)

    assert pooled.transform.mean == pytest.approx((0.5, 0.2))
    assert pooled.transform.std == pytest.approx((0.5, 1.0))


@pytest.mark.parametrize(("choice", "expected"), [
    ("scale", Transform(1 / 255)), ("none", Transform()),
])
def test_normalisation_scale_and_none(tmp_path, choice, expected):
    np.savez(tmp_path / "d.npz", x=RNG.integers(0, 256, (4, 3), dtype=np.uint8), y=np.arange(4))
    spec = make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz, normalization: {choice}}}")

    assert load_pooled(spec, RNG).transform == expected


def test_normalisation_with_the_wrong_number_of_channels_names_the_field(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 3, 2, 2), np.uint8), y=np.arange(4))
    spec = make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz, "
                     "normalization: {mean: [0.5, 0.5], std: [0.2, 0.2]}}")

    with pytest.raises(DataError, match=r"dataset.normalization: 2 mean/std values for samples "
                                        r"of 3 channels; give 1 or 3"):
        load_pooled(spec, RNG)


def test_per_feature_normalisation_uses_the_training_rows_only(tmp_path):
    # Issue 27: (x − μ)/(σ + 0.001) per feature over the pooled TRAINING rows (FedProx's MNIST).
    # Train rows (0, 1), (2, 1), (4, 1): μ = (2, 1), σ = (√(8/3), 0) = (1.632993, 0). The val
    # rows (10, 10), (0, 0) and test rows would move both if they counted.
    from pflpipe.data import load_partition
    from pflpipe.stages import partition_data

    x = np.array([[0, 1], [2, 1], [10, 10], [4, 5], [4, 1], [0, 0], [2, 3]], dtype=np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.array([0, 1, 0, 1, 0, 1, 0]),
             client=np.array([0, 0, 0, 0, 1, 1, 1]),
             split=np.array(["train", "train", "val", "test", "train", "val", "test"]))
    spec = make_spec(f"{{name: arrays, root: {tmp_path}, path: d.npz, "
                     "normalization: per_feature}", "{strategy: predefined}")

    partition_data.run(spec, 0, tmp_path / "p")
    clients = load_partition(tmp_path / "p").clients

    sd = np.sqrt(8 / 3) + 0.001
    expected = {(0, "train"): [[-2 / sd, 0], [0, 0]], (0, "val"): [[8 / sd, 9 / 0.001]],
                (0, "test"): [[2 / sd, 4 / 0.001]], (1, "train"): [[2 / sd, 0]],
                (1, "val"): [[-2 / sd, -1 / 0.001]], (1, "test"): [[0, 2 / 0.001]]}
    for (client, split), values in expected.items():
        np.testing.assert_allclose(clients[client].split(split).x.numpy(), values, rtol=1e-6,
                                   atol=1e-6)
