"""`pflpipe split --export`: a partition written for other tools comes back as a predefined split
and trains to exactly the same numbers."""

import numpy as np
import pytest

from pflpipe.cli import main
from pflpipe.data import load_partition
from pflpipe.data.export import export_partition
from pflpipe.spec import read_spec
from pflpipe.stages import partition_data, warm_start_fedavg
from pflpipe.training import csv_tables

SPEC = """\
experiment: {{name: t, output_dir: {out}}}
dataset: {dataset}
partition: {partition}
federation: {{rounds: 2}}
tracking: {{enabled: false}}
"""
DIGITS = "{name: digits, normalization: standard}"


def write_spec(tmp_path, name: str, dataset: str, partition: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(out=tmp_path / name, dataset=dataset, partition=partition))
    return path


def trained(spec_path, tmp_path, name: str) -> tuple[list[dict], list]:
    """Partition and warm-start a spec in-process; return results.csv and the partition."""
    spec = read_spec(spec_path)
    work = tmp_path / f"run-{name}"
    partition_data.run(spec, 0, work / "partition")
    warm_start_fedavg.run(spec, 0, work / "partition", work / "checkpoints", work / "fedavg")
    return csv_tables.read_csv(work / "fedavg" / "results.csv"), load_partition(work / "partition")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("export")
    spec = write_spec(tmp_path, "original", DIGITS, "{strategy: ds2, n_clients: 4, alpha: 0.5}")
    assert main(["split", str(spec), "-o", str(tmp_path / "split"), "--export", "npz",
                 str(tmp_path / "npz")]) == 0
    export_partition(tmp_path / "split", "pfllib", tmp_path / "pfllib")
    return tmp_path, trained(spec, tmp_path, "original")


def assert_same_training(first, second):
    (rows_a, part_a), (rows_b, part_b) = first, second
    for a, b in zip(part_a.clients, part_b.clients, strict=True):
        for split in ("train", "val", "test"):
            assert np.array_equal(a.split(split).x.numpy(), b.split(split).x.numpy())
            assert a.split(split).y.tolist() == b.split(split).y.tolist()
    assert rows_a == rows_b  # every client's accuracy and loss at the same rounds, to the bit


def test_export_npz_reimported_as_predefined_split_trains_identically(original):
    tmp_path, first = original
    spec = write_spec(tmp_path, "npz", DIGITS,
                      f"{{strategy: predefined, path: {tmp_path / 'npz' / 'indices.npz'}}}")

    assert_same_training(first, trained(spec, tmp_path, "npz"))


def test_export_pfllib_reimported_as_client_files_trains_identically(original):
    tmp_path, first = original
    dataset = f"{{name: client_files, layout: pfllib, root: {tmp_path}, path: pfllib}}"
    spec = write_spec(tmp_path, "pfllib", dataset, "{strategy: predefined}")

    # PFLlib's files hold normalised float32 inputs, used as given ('auto' for floats)
    assert_same_training(first, trained(spec, tmp_path, "pfllib"))


def test_split_export_unknown_format_exits_2_naming_the_choices(tmp_path, capsys):
    spec = write_spec(tmp_path, "s", DIGITS, "{strategy: iid, n_clients: 2}")

    code = main(["split", str(spec), "--export", "fedml", str(tmp_path / "x")])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--export: unknown format 'fedml'; choose one of pfllib, flower, npz" in err


@pytest.mark.parametrize("fmt", ["flower", "pfllib"])
def test_export_of_a_regression_is_its_data_without_a_package_it_cannot_reproduce(
        tmp_path, capsys, fmt):
    # pflpipe trains a regression with the summed Gaussian NLL: the package's cross-entropy and
    # accuracies (reproduce.json, the Flower app, PFLlib's -ncl) would not reproduce it
    spec = write_spec(tmp_path, "gauss", "{name: gaussian, n_min: 10, n_max: 30}",
                      "{strategy: natural, n_clients: 4, min_samples: 5}")

    code = main(["split", str(spec), "--export", fmt, str(tmp_path / "out")])

    out = capsys.readouterr().out
    assert code == 0
    assert ("the data only: no reproduction package for a regression, which pflpipe trains with "
            "the summed Gaussian NLL") in out
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ([".pflpipe-written.json", "partition_0", "partition_1", "partition_2",
                        "partition_3", "partitions.json"] if fmt == "flower" else
                       [".pflpipe-written.json", "config.json", "test", "train", "val"])
