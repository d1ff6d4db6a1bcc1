"""`pflpipe split`: digits and user arrays end to end, clear failures with exit 2."""

import json
import subprocess
import sys

import numpy as np
import pytest

from pflpipe.cli import main
from pflpipe.data import load_partition

DIGITS = """\
experiment:
  name: t
  output_dir: {out}
dataset:
  name: digits
partition:
  strategy: ds1
  n_clients: 10
  classes_per_client: 4
"""


def write_spec(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_split_digits_writes_partition_and_prints_table(tmp_path, capsys):
    spec = write_spec(tmp_path, DIGITS.format(out=tmp_path / "results"))

    code = main(["split", str(spec), "-o", str(tmp_path / "p")])

    out = capsys.readouterr().out
    partition = load_partition(tmp_path / "p", verify=True)
    assert code == 0
    assert partition.n_clients == 10 and partition.input_shape == (1, 8, 8)
    # DS-1: 10 clients × 4 classes over ~180 images per class: 173 each (103/35/35)
    assert {len(c.train) + len(c.val) + len(c.test) for c in partition.clients} == {173}
    assert "│      0 │   103 │  35 │   35 │   173 │" in out
    assert partition.content_hash in out
    assert (tmp_path / "p" / "label_distribution.png").is_file()


def test_split_default_directory_is_results_partition_seed(tmp_path, capsys):
    spec = write_spec(tmp_path, DIGITS.format(out=tmp_path / "results"))

    assert main(["split", str(spec), "--seed", "7"]) == 0

    manifest = json.loads((tmp_path / "results" / "partition" / "seed-7" / "manifest.json")
                          .read_text())
    assert manifest["seed"] == 7


def test_split_npz_with_client_groups_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "mine.npz", x=rng.normal(size=(30, 5)).astype(np.float32),
             y=np.arange(30) % 3, client=np.repeat([10, 20, 30], 10))
    spec = write_spec(tmp_path, f"experiment: {{name: t}}\ndataset: {{name: arrays, root: "
                                f"{tmp_path}, path: mine.npz}}\npartition: {{strategy: natural, "
                                "n_clients: 3, min_samples: 5}\n")

    code = main(["split", str(spec), "-o", str(tmp_path / "p")])

    partition = load_partition(tmp_path / "p")
    assert code == 0
    # group 20 is client 1: positions 10..19, 6/2/2 with every class in every split's pool
    indices = sorted(int(i) for c in ("train", "val", "test")
                     for i in partition.clients[1].split(c).index)
    assert indices == list(range(10, 20))
    assert [len(partition.clients[1].split(s)) for s in ("train", "val", "test")] == [6, 2, 2]
    assert "0-2" in capsys.readouterr().out


def test_split_impossible_named_dataset_fails_before_loading(tmp_path, capsys):
    spec = write_spec(tmp_path, DIGITS.format(out=tmp_path).replace(
        "n_clients: 10", "n_clients: 1000\n  min_samples: 50"))

    code = main(["split", str(spec)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "partition.min_samples: 1,000 clients × 50 samples = 50,000 exceeds the 1,797 " \
           "samples of 'digits' by 48,203; use at most 35 clients" in err


def test_split_impossible_user_data_fails_with_shortfall(tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((1797, 4), np.uint8), y=np.arange(1797) % 10)
    spec = write_spec(tmp_path, f"experiment: {{name: t}}\ndataset: {{name: arrays, root: "
                                f"{tmp_path}, path: d.npz}}\npartition: {{strategy: iid, "
                                "n_clients: 1000, min_samples: 50}\n")

    code = main(["split", str(spec)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "1,000 clients × min_samples 50 = 50,000 samples, but 'arrays' has 1,797 " \
           "(48,203 short); use at most 35 clients" in err


def test_split_unreachable_min_samples_stops_after_max_retries(tmp_path, capsys):
    spec = write_spec(tmp_path, DIGITS.format(out=tmp_path).replace(
        "strategy: ds1", "strategy: ds2\n  alpha: 0.05\n  max_retries: 20\n  min_samples: 150")
        .replace("  classes_per_client: 4\n", ""))

    code = main(["split", str(spec)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "ds2 with α = 0.05: after 20 draws (partition.max_retries)" in err
    assert "below partition.min_samples = 150" in err


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_split_missing_files_exit_2_naming_the_layout(tmp_path, capsys, name):
    spec = write_spec(tmp_path, f"experiment: {{name: t}}\ndataset: {{name: {name}, root: "
                                f"{tmp_path / 'none'}}}\npartition: {{strategy: iid}}\n")

    code = main(["split", str(spec)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "Expected layout" in err and "dataset.allow_download: true" in err


@pytest.mark.slow
def test_split_in_another_process_gives_the_same_hash(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.integers(0, 256, (200, 6), dtype=np.uint8),
             y=np.arange(200) % 5)
    spec = write_spec(tmp_path, f"experiment: {{name: t}}\ndataset: {{name: arrays, root: "
                                f"{tmp_path}, path: d.npz}}\npartition: {{strategy: ds2, "
                                "n_clients: 6}\n")
    assert main(["split", str(spec), "-o", str(tmp_path / "here"), "--seed", "3"]) == 0
    script = "import sys; from pflpipe.cli import main; sys.exit(main(sys.argv[1:]))"

    proc = subprocess.run([sys.executable, "-c", script, "split", str(spec), "-o",
                           str(tmp_path / "there"), "--seed", "3"], capture_output=True, text=True)

    assert proc.returncode == 0, proc.stderr
    here = json.loads((tmp_path / "here" / "manifest.json").read_text())["content_hash"]
    there = json.loads((tmp_path / "there" / "manifest.json").read_text())["content_hash"]
    assert here == there
