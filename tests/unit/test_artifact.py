"""The partition directory: written once, read back exactly, hashed by the documented recipe."""

import hashlib
import json

import numpy as np
import pytest
import torch

from pflpipe.data import load_partition, partition_dataset, write_partition
from pflpipe.errors import DataError
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data
from pflpipe.tracking import Tracker


@pytest.fixture
def arrays_spec(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (60, 2, 3), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(60) % 3)

    def make(strategy: str = "{strategy: iid, n_clients: 4}"):
        return parse_spec(f"experiment: {{name: t}}\ndataset: {{name: arrays, root: {tmp_path}, "
                          f"path: d.npz}}\npartition: {strategy}\n")
    return make


def write(spec, seed, out):
    plan = partition_dataset(spec, seed)
    return plan, write_partition(plan, spec.partition.model_dump(mode="json"), out)


def test_load_partition_returns_transformed_samples_and_positions(arrays_spec, tmp_path):
    spec = arrays_spec()
    plan, _ = write(spec, 0, tmp_path / "p")

    partition = load_partition(tmp_path / "p")

    client = partition.clients[2]
    pooled = plan.pooled
    index = client.val.index.numpy()
    assert partition.n_clients == 4 and partition.n_classes == 3
    assert partition.input_shape == (1, 2, 3)  # grey images gain a channel axis
    assert client.val.x.dtype == torch.float32
    # uint8 images are standardised like the torchvision datasets, with the data's own stats
    scaled = pooled.x / 255
    expected = (scaled[index] - scaled.mean()) / scaled.std()
    assert torch.allclose(client.val.x, torch.from_numpy(expected).float(), atol=1e-6)
    assert client.val.y.tolist() == pooled.y[index].tolist()
    assert client.split("val") is client.val


def test_load_partition_raw_keeps_the_stored_dtype(arrays_spec, tmp_path):
    write(arrays_spec(), 0, tmp_path / "p")

    partition = load_partition(tmp_path / "p", transform=False)

    assert partition.clients[0].train.x.dtype == torch.uint8


def test_manifest_counts_match_the_stored_labels(arrays_spec, tmp_path):
    plan, manifest = write(arrays_spec(), 0, tmp_path / "p")

    partition = load_partition(tmp_path / "p")

    for entry, client in zip(manifest["clients"], partition.clients, strict=True):
        for split in ("train", "val", "test"):
            labels = client.split(split).y
            assert entry["n"][split] == len(labels)
            assert entry["counts"][split] == torch.bincount(labels, minlength=3).tolist()
    assert manifest["n_assigned"] == 60 and manifest["seed"] == 0
    scaled = plan.pooled.x / 255
    assert manifest["dataset"]["transform"] == {"scale": 1 / 255,
                                                "mean": [pytest.approx(scaled.mean())],
                                                "std": [pytest.approx(scaled.std())]}


def test_content_hash_follows_the_documented_recipe(arrays_spec, tmp_path):
    _, manifest = write(arrays_spec(), 3, tmp_path / "p")
    digest = hashlib.sha256()

    for entry in manifest["clients"]:
        stored = torch.load(tmp_path / "p" / "clients" / entry["file"], weights_only=True)
        for split in ("train", "val", "test"):
            for key in ("x", "y", "index"):
                array = stored[split][key].numpy()
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(array.tobytes())
    fields = {key: manifest[key] for key in ("dataset", "partition", "resolved", "seed")}
    digest.update(json.dumps(fields, sort_keys=True).encode())

    assert manifest["content_hash"] == digest.hexdigest()


def test_same_seed_writes_identical_bytes(arrays_spec, tmp_path):
    spec = arrays_spec("{strategy: ds2, n_clients: 3, min_samples: 5}")
    _, first = write(spec, 5, tmp_path / "a")
    _, second = write(spec, 5, tmp_path / "b")

    assert first["content_hash"] == second["content_hash"]
    for entry in first["clients"]:
        assert ((tmp_path / "a" / "clients" / entry["file"]).read_bytes()
                == (tmp_path / "b" / "clients" / entry["file"]).read_bytes())


def test_verify_detects_a_changed_client_file(arrays_spec, tmp_path):
    write(arrays_spec(), 0, tmp_path / "p")
    file = tmp_path / "p" / "clients" / "client_0001.pt"
    stored = torch.load(file, weights_only=True)
    stored["test"]["y"][0] = (stored["test"]["y"][0] + 1) % 3
    torch.save(stored, file)

    with pytest.raises(DataError, match="does not match the manifest"):
        load_partition(tmp_path / "p", verify=True)


def test_rewriting_removes_clients_of_an_earlier_partition(arrays_spec, tmp_path):
    write(arrays_spec("{strategy: iid, n_clients: 5}"), 0, tmp_path / "p")
    write(arrays_spec("{strategy: iid, n_clients: 2}"), 0, tmp_path / "p")

    assert sorted(p.name for p in (tmp_path / "p" / "clients").iterdir()) == [
        "client_0000.pt", "client_0001.pt"]
    assert load_partition(tmp_path / "p", verify=True).n_clients == 2


def test_load_partition_without_manifest_says_how_to_make_one(tmp_path):
    with pytest.raises(DataError, match="not a partition directory .*pflpipe split"):
        load_partition(tmp_path)


def test_load_partition_rejects_another_format(arrays_spec, tmp_path):
    _, manifest = write(arrays_spec(), 0, tmp_path / "p")
    (tmp_path / "p" / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))

    with pytest.raises(DataError, match="partition format 2; this pflpipe reads format 1"):
        load_partition(tmp_path / "p")


def test_heatmap_is_a_png(arrays_spec, tmp_path):
    write(arrays_spec(), 0, tmp_path / "p")

    assert (tmp_path / "p" / "label_distribution.png").read_bytes()[:4] == b"\x89PNG"


def test_concept_drift_stores_superclasses_and_source_classes(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((40, 2), np.float32), y=np.arange(40) % 4)
    spec = parse_spec(f"experiment: {{name: t}}\ndataset: {{name: arrays, root: {tmp_path}, "
                      "path: d.npz}\npartition: {strategy: concept_drift, n_clients: 2, "
                      "groups: 2}\n")

    _, manifest = write(spec, 0, tmp_path / "p")

    # superclasses {0, 1} → 0 and {2, 3} → 1; two holders deal each superclass's two subclasses
    sources = sorted(entry["source_classes"] for entry in manifest["clients"])
    assert manifest["dataset"]["n_classes"] == 2
    assert all(entry["classes"] == [0, 1] for entry in manifest["clients"])
    assert sorted(sources[0] + sources[1]) == [0, 1, 2, 3]
    assert all(source[0] in (0, 1) and source[1] in (2, 3) for source in sources)


def test_regression_partition_keeps_float_targets(tmp_path):
    spec = parse_spec("experiment: {name: t}\ndataset: {name: gaussian, n_min: 5, n_max: 9}\n"
                      "partition: {strategy: natural, n_clients: 3, min_samples: 5}\n")
    _, manifest = write(spec, 0, tmp_path / "p")

    partition = load_partition(tmp_path / "p", verify=True)

    assert partition.task == "regression" and partition.n_classes is None
    assert partition.clients[0].train.y.dtype == torch.float32
    assert manifest["clients"][0]["counts"] is None
    assert (tmp_path / "p" / "label_distribution.png").is_file()


class RecordingTracker(Tracker):
    """A tracker that keeps what it is given (the Tracker interface, nothing of the stage)."""

    def __init__(self):
        self.params, self.metrics, self.artifacts = {}, {}, []

    def log_params(self, params):
        self.params.update(params)

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(path.name)


def test_partition_data_stage_logs_hash_and_heatmap(arrays_spec, tmp_path):
    tracker = RecordingTracker()

    result = partition_data.run(arrays_spec(), 0, tmp_path / "p", tracker=tracker)

    assert tracker.params["content_hash"] == result.content_hash
    assert tracker.params["n_clients"] == 4 and tracker.metrics["n_assigned"] == 60
    assert "label_distribution.png" in tracker.artifacts
    markdown = result.to_markdown()
    assert "| client | train | val | test | total | classes |" in markdown
    assert "| 3 | 9 | 3 | 3 | 15 | 0-2 |" in markdown  # 15 samples: 9/3/3, all three classes


def test_format_classes_writes_runs():
    assert partition_data.format_classes((0, 1, 2, 5, 7, 8)) == "0-2, 5, 7, 8"
    assert partition_data.format_classes(tuple(range(100))) == "0-99"
    assert partition_data.format_classes(tuple(range(0, 40, 2))) == "20 classes"


def test_the_stage_draws_the_heatmap_beside_as_write_partition_draws_it(arrays_spec, tmp_path):
    # partition_data draws it in a forked child (matplotlib imported while torch is): the same
    # bytes, written before the manifest, the manifest the same
    spec = arrays_spec()
    _, manifest = write(spec, 0, tmp_path / "here")

    result = partition_data.run(spec, 0, tmp_path / "beside", reuse_split=False)

    here, beside = tmp_path / "here", tmp_path / "beside"
    png = "label_distribution.png"
    assert (beside / png).read_bytes() == (here / png).read_bytes()
    assert (beside / png).stat().st_mtime_ns <= (beside / "manifest.json").stat().st_mtime_ns
    assert json.loads((beside / "manifest.json").read_text()) == manifest
    assert result.content_hash == manifest["content_hash"]
