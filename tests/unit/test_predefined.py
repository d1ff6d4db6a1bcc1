"""Predefined splits: index files and other tools' per-client files, used exactly; exports."""

import json

import numpy as np
import pytest

from pflpipe.data import load_partition, partition_dataset, write_partition
from pflpipe.data.datasets import load_pooled
from pflpipe.data.export import export_partition
from pflpipe.errors import DataError
from pflpipe.spec import parse_spec

RNG = np.random.default_rng(0)


def spec_of(dataset: str, partition: str):
    return parse_spec(f"experiment: {{name: t}}\ndataset: {dataset}\npartition: {partition}\n")


def arrays_file(tmp_path, n: int = 40, **extra):
    x = RNG.integers(0, 256, (n, 1, 2, 2), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(n) % 4, **extra)
    return f"{{name: arrays, root: {tmp_path}, path: d.npz}}"


def rows(plan):
    return [[client[s].tolist() for s in ("train", "val", "test")] for client in plan.clients]


def test_predefined_json_rows_are_used_exactly_in_their_order(tmp_path):
    clients = [{"train": [5, 1, 3], "val": [7], "test": [0, 9]},
               {"train": [2, 4], "val": [8], "test": [6]}]
    (tmp_path / "split.json").write_text(json.dumps({"clients": clients}))

    plan = partition_dataset(spec_of(arrays_file(tmp_path),
                                     "{strategy: predefined, path: split.json}"), 0)

    assert rows(plan) == [[[5, 1, 3], [7], [0, 9]], [[2, 4], [8], [6]]]
    assert plan.resolved["n_clients"] == 2 and len(plan.resolved["index_sha256"]) == 64


def test_predefined_leaf_style_json_and_npz_give_the_same_rows(tmp_path):
    leaf = {"users": ["f_b", "f_a"], "user_data": {"f_a": {"train": [3, 4], "test": [5]},
                                                   "f_b": {"train": [0, 1], "test": [2]}}}
    (tmp_path / "leaf.json").write_text(json.dumps(leaf))
    np.savez(tmp_path / "split.npz", train_0=[0, 1], test_0=[2], train_1=[3, 4], test_1=[5])
    dataset = arrays_file(tmp_path)

    from_leaf = partition_dataset(spec_of(dataset, "{strategy: predefined, path: leaf.json}"), 0)
    from_npz = partition_dataset(spec_of(dataset, "{strategy: predefined, path: split.npz}"), 0)

    # users in the file's `users` order; no val rows: no validation split
    assert rows(from_leaf) == rows(from_npz) == [[[0, 1], [], [2]], [[3, 4], [], [5]]]


@pytest.mark.parametrize(("clients", "partition", "message"), [
    ([{"train": [0, 40], "test": [1]}], "", "client 0 has row 40 outside the dataset's 40 rows"),
    ([{"train": [0, 1], "test": [1]}], "", "client 0 lists row 1 more than once"),
    ([{"train": [0, 1], "test": []}], "", "client 0 has no test rows"),
    ([{"train": [0], "val": [2], "test": [1]}, {"train": [3], "test": [4]}], "",
     r"clients \[1\] have no validation rows but others do"),
    ([{"train": [0], "test": [1]}], ", n_clients: 3",
     "defines 1 clients but partition.n_clients is 3"),
    ([{"train": [0.5], "test": [1]}], "", "client 0's train rows must be a list of integer"),
    ([{"train": [0], "tset": [1]}], "", r"client 0 has unknown split\(s\) \['tset'\]"),
])
def test_predefined_bad_rows_are_errors_naming_the_client(tmp_path, clients, partition, message):
    (tmp_path / "split.json").write_text(json.dumps({"clients": clients}))
    spec = spec_of(arrays_file(tmp_path), f"{{strategy: predefined, path: split.json{partition}}}")

    with pytest.raises(DataError, match=message):
        partition_dataset(spec, 0)


def test_predefined_val_from_train_holds_out_stratified_rows_and_keeps_the_order(tmp_path):
    train = list(range(39, 19, -1))  # 20 rows, 5 of each class (y = row % 4), given descending
    (tmp_path / "split.json").write_text(json.dumps({"clients": [{"train": train,
                                                                  "test": [0, 1]}]}))
    spec = spec_of(arrays_file(tmp_path),
                   "{strategy: predefined, path: split.json, val_from_train: 0.2}")

    client = partition_dataset(spec, 0).clients[0]

    assert sorted(client.train.tolist() + client.val.tolist()) == sorted(train)
    assert np.bincount(client.val % 4).tolist() == [1, 1, 1, 1]  # 4 rows, one per class
    assert client.train.tolist() == [r for r in train if r not in set(client.val.tolist())]


def test_arrays_with_client_and_split_arrays_are_a_predefined_split(tmp_path):
    client = np.repeat([7, 3], 6)
    split = np.array(["train", "train", "val", "test", "train", "test"] * 2)
    dataset = arrays_file(tmp_path, n=12, client=client, split=split)

    plan = partition_dataset(spec_of(dataset, "{strategy: predefined}"), 0)

    # groups in ascending id order: group 3 (rows 6..11) is client 0
    assert rows(plan) == [[[6, 7, 10], [8], [9, 11]], [[0, 1, 4], [2], [3, 5]]]


def test_predefined_without_path_needs_the_datasets_own_splits(tmp_path):
    with pytest.raises(DataError, match="arrays file needs 'client' and 'split' arrays"):
        partition_dataset(spec_of(arrays_file(tmp_path), "{strategy: predefined}"), 0)


# ---- other tools' per-client files -------------------------------------------------------------

def write_pfllib(root, clients):
    """PFLlib's own writer (dataset/utils/dataset_utils.py: save_file)."""
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
        for k, client in enumerate(clients):
            with open(root / split / f"{k}.npz", "wb") as handle:
                np.savez_compressed(handle, data={"x": client[split][0], "y": client[split][1]})


def test_client_files_pfllib_layout_pools_clients_and_splits_in_file_order(tmp_path):
    xs = RNG.normal(size=(9, 1, 2, 2)).astype(np.float32)
    clients = [{"train": (xs[:3], np.array([0, 1, 1])), "test": (xs[3:4], np.array([2]))},
               {"train": (xs[4:7], np.array([2, 0, 1])), "test": (xs[7:], np.array([1, 0]))}]
    write_pfllib(tmp_path / "MNIST", clients)
    dataset = f"{{name: client_files, layout: pfllib, root: {tmp_path}, path: MNIST}}"

    plan = partition_dataset(spec_of(dataset, "{strategy: predefined}"), 0)

    pooled = plan.pooled
    assert np.array_equal(pooled.x, xs) and pooled.y.tolist() == [0, 1, 1, 2, 2, 0, 1, 1, 0]
    assert rows(plan) == [[[0, 1, 2], [], [3]], [[4, 5, 6], [], [7, 8]]]
    assert pooled.transform.scale == 1.0 and pooled.transform.mean == (0.0,)  # floats as given


def test_client_files_pfllib_refuses_a_pickle_that_builds_anything_else(tmp_path):
    class Payload:
        def __reduce__(self):  # unpickling would call eval("0")
            return (eval, ("0",))

    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    for split in ("train", "test"):  # numpy pickles the payload, as PFLlib's writer does
        with open(tmp_path / split / "0.npz", "wb") as handle:
            np.savez_compressed(handle, data={"x": Payload(), "y": np.array([0])})
    dataset = f"{{name: client_files, layout: pfllib, root: {tmp_path}}}"

    with pytest.raises(DataError, match=r"refusing to load builtins\.eval"):
        load_pooled(spec_of(dataset, "{strategy: predefined}"), RNG)


def test_client_files_leaf_layout_reads_users_across_files(tmp_path):
    # LEAF stores flat vectors (FEMNIST: 784 floats); input_shape restores the image
    flat = {v: [float(v)] * 4 for v in range(5)}
    for split, users in (("train", {"u1": [flat[0], flat[1]], "u2": [flat[2]]}),
                         ("test", {"u2": [flat[3]], "u1": [flat[4]]})):
        (tmp_path / split).mkdir()
        for i, (user, x) in enumerate(users.items()):  # one user per file, as LEAF's shards do
            content = {"users": [user], "num_samples": [len(x)],
                       "user_data": {user: {"x": x, "y": [1] * len(x)}}}
            (tmp_path / split / f"part_{i}.json").write_text(json.dumps(content))
    dataset = (f"{{name: client_files, layout: leaf, root: {tmp_path}, input_shape: [1, 2, 2], "
               "n_classes: 3}")

    plan = partition_dataset(spec_of(dataset, "{strategy: predefined}"), 0)

    assert plan.pooled.x.shape == (5, 1, 2, 2) and plan.n_classes == 3
    assert plan.pooled.x[:, 0, 0, 0].tolist() == [0.0, 1.0, 4.0, 2.0, 3.0]
    assert rows(plan) == [[[0, 1], [], [2]], [[3], [], [4]]]


def test_export_pfllib_and_flower_hold_the_model_inputs_pflpipe_trains_on(tmp_path):
    spec = spec_of(arrays_file(tmp_path, n=60), "{strategy: iid, n_clients: 3}")
    plan = partition_dataset(spec, 0)
    write_partition(plan, spec.partition.model_dump(mode="json"), tmp_path / "p")
    partition = load_partition(tmp_path / "p")

    export_partition(tmp_path / "p", "pfllib", tmp_path / "pfllib")
    export_partition(tmp_path / "p", "flower", tmp_path / "flower")

    for client in partition.clients:
        k = client.client_id
        for split in ("train", "val", "test"):
            with open(tmp_path / "pfllib" / split / f"{k}.npz", "rb") as handle:  # PFLlib's reader
                data = np.load(handle, allow_pickle=True)["data"].tolist()
            with np.load(tmp_path / "flower" / f"partition_{k}" / f"{split}.npz") as flower:
                assert np.array_equal(flower["x"], client.split(split).x.numpy())
            assert np.array_equal(data["x"], client.split(split).x.numpy())
            assert data["y"].tolist() == client.split(split).y.tolist()
    config = json.loads((tmp_path / "pfllib" / "config.json").read_text())
    assert config["num_clients"] == 3 and config["num_classes"] == 4
    assert json.loads((tmp_path / "flower" / "partitions.json").read_text())[
        "num_partitions"] == 3


def test_flower_export_reads_back_as_client_files_with_the_same_clients_and_inputs(tmp_path):
    spec = spec_of(arrays_file(tmp_path, n=60), "{strategy: ds2, n_clients: 3, alpha: 1.0}")
    plan = partition_dataset(spec, 0)
    write_partition(plan, spec.partition.model_dump(mode="json"), tmp_path / "p")
    export_partition(tmp_path / "p", "flower", tmp_path / "flower")
    dataset = f"{{name: client_files, layout: flower, root: {tmp_path}, path: flower}}"

    back = partition_dataset(spec_of(dataset, "{strategy: predefined}"), 0)

    original = load_partition(tmp_path / "p")
    assert [[len(c[s]) for s in ("train", "val", "test")] for c in back.clients] == \
        [[len(c.split(s)) for s in ("train", "val", "test")] for c in original.clients]
    for client, rows_of in zip(original.clients, back.clients, strict=True):
        for split in ("train", "val", "test"):
            assert np.array_equal(back.pooled.x[rows_of[split]], client.split(split).x.numpy())
            assert back.pooled.y[rows_of[split]].tolist() == client.split(split).y.tolist()
