"""`pflpipe split` writes into no directory holding another run's or the user's files unless
`--force` (issue 30), and says only what is true of a split without validation (issue 32)."""

import json

import pytest

from pflpipe import events
from pflpipe.cli import main
from pflpipe.data import load_partition, read_manifest
from pflpipe.layout import WRITTEN_JSON
from pflpipe.spec import read_spec
from pflpipe.stages import warm_start_fedavg

SPEC = """\
experiment: {{name: g, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: iid, n_clients: {clients}{fractions}}}
federation: {{rounds: 2}}
personalization: {personalization}
tracking: {{enabled: false}}
"""
NO_VAL = ", fractions: {train: 0.75, test: 0.25}"


def write_spec(tmp_path, clients: int = 9, fractions: str = "", personalization: str = "[]",
               name: str = "spec.yaml"):
    path = tmp_path / name
    path.write_text(SPEC.format(out=tmp_path / "results", clients=clients, fractions=fractions,
                                personalization=personalization))
    return path


def finished_run(tmp_path):
    """A published run's partition: results/g/runs/<run>/seed-0/partition (9 clients)."""
    partition = tmp_path / "results" / "runs" / "20261126-120000-1a2b3c4d" / "seed-0" / "partition"
    assert main(["split", str(write_spec(tmp_path)), "-o", str(partition)]) == 0
    (partition / WRITTEN_JSON).unlink()   # the pipeline wrote it, not `pflpipe split`
    return partition


def test_split_into_a_finished_runs_partition_refuses_naming_the_run_and_force(tmp_path, capsys):
    partition = finished_run(tmp_path)
    before = read_manifest(partition)["content_hash"]
    other = write_spec(tmp_path, clients=6, name="six.yaml")

    code = main(["split", str(other), "-o", str(partition)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert (f"{partition} holds files of run '20261126-120000-1a2b3c4d' (clients, "
            "label_distribution.png, manifest.json) that `pflpipe split` did not write") in err
    assert "--force" in err
    assert read_manifest(partition)["content_hash"] == before
    assert load_partition(partition, verify=True).n_clients == 9   # untouched, still whole


def test_split_again_into_its_own_directory_replaces_it_and_force_a_runs(tmp_path, capsys):
    own = tmp_path / "own"
    assert main(["split", str(write_spec(tmp_path)), "-o", str(own)]) == 0
    partition = finished_run(tmp_path)
    six = write_spec(tmp_path, clients=6, name="six.yaml")

    assert main(["split", str(six), "-o", str(own)]) == 0   # what split wrote there itself
    assert main(["split", str(six), "-o", str(partition), "--force"]) == 0

    for directory in (own, partition):
        assert load_partition(directory, verify=True).n_clients == 6
        assert sorted(p.name for p in (directory / "clients").iterdir()) == [
            f"client_{k:04d}.pt" for k in range(6)]


def test_split_into_a_directory_of_user_files_refuses(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")

    code = main(["split", str(write_spec(tmp_path)), "-o", str(mine)])

    err = capsys.readouterr().err
    assert code == 2 and "holds files (notes.txt) that `pflpipe split` did not write" in err
    assert "--force" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("fmt", ["flower", "pfllib"])
def test_export_into_user_files_refuses_without_force(tmp_path, capsys, fmt):
    target = tmp_path / "export"
    target.mkdir()
    (target / "README.md").write_text("my notes")
    (target / "data.csv").write_text("1,2")
    spec = write_spec(tmp_path)

    code = main(["split", str(spec), "--export", fmt, str(target)])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert ("holds files (README.md, data.csv) that `pflpipe split --export` did not write"
            in err and "--force" in err)
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "data.csv"]
    assert (target / "README.md").read_text() == "my notes"


@pytest.mark.parametrize("force", [False, True])
def test_flower_export_of_9_then_6_clients_leaves_no_stale_partition_it_wrote(tmp_path, capsys,
                                                                               force):
    target = tmp_path / "flower"
    if force:   # an older export (no record of its files) holds partition_0..8 and user files
        target.mkdir()
        for k in range(9):
            (target / f"partition_{k}").mkdir()
            (target / f"partition_{k}" / "train.npz").write_bytes(b"old")
    else:
        assert main(["split", str(write_spec(tmp_path)), "--export", "flower", str(target)]) == 0
    six = write_spec(tmp_path, clients=6, name="six.yaml")

    flags = ["--force"] if force else []
    assert main(["split", str(six), "--export", "flower", str(target), *flags]) == 0

    # --force removes nothing it did not record: an unrecorded export's partition_6..8 stay
    assert sorted(p.name for p in target.glob("partition_*")) == [
        f"partition_{k}" for k in range(9 if force else 6)]
    if force:
        assert (target / "partition_8" / "train.npz").read_bytes() == b"old"
        for k in range(6, 9):   # what the reader below would take for three more clients
            (target / f"partition_{k}" / "train.npz").unlink()
            (target / f"partition_{k}").rmdir()
    assert json.loads((target / "partitions.json").read_text())["num_partitions"] == 6
    spec = tmp_path / "read.yaml"
    spec.write_text(f"experiment: {{name: r, output_dir: {tmp_path / 'r'}}}\n"
                    f"dataset: {{name: client_files, layout: flower, root: {tmp_path}, "
                    "path: flower}\npartition: {strategy: predefined}\n"
                    "tracking: {enabled: false}\n")
    assert main(["split", str(spec), "-o", str(tmp_path / "back")]) == 0
    back = load_partition(tmp_path / "back")
    assert back.n_clients == 6
    assert sum(len(c.train) + len(c.val) + len(c.test) for c in back.clients) == 1797


def test_pfllib_export_of_9_then_6_clients_leaves_no_stale_client_file(tmp_path, capsys):
    target = tmp_path / "pfllib"
    assert main(["split", str(write_spec(tmp_path)), "--export", "pfllib", str(target)]) == 0

    six = write_spec(tmp_path, clients=6, name="six.yaml")
    assert main(["split", str(six), "--export", "pfllib", str(target)]) == 0

    for split in ("train", "val", "test"):
        assert sorted(p.name for p in (target / split).iterdir()) == [f"{k}.npz" for k in range(6)]


# ---- issue 32's trip-ups on a split without validation ------------------------------------------

def test_split_without_validation_names_no_val_file_and_writes_none(tmp_path, capsys):
    spec = write_spec(tmp_path, fractions=NO_VAL)

    assert main(["split", str(spec), "--export", "flower", str(tmp_path / "f")]) == 0

    out = capsys.readouterr().out
    exported = out.split("exported")[1]
    assert "partition_<k>/{train,test}.npz" in exported and "train,val" not in exported
    assert not list((tmp_path / "f").glob("partition_*/val.npz"))
    assert main(["split", str(spec), "--export", "pfllib", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "val/<k>.npz" not in out and not (tmp_path / "p" / "val").exists()


def test_split_prints_the_no_validation_warning_once(tmp_path, capsys):
    assert main(["split", str(write_spec(tmp_path, fractions=NO_VAL))]) == 0

    assert capsys.readouterr().out.count("no validation split") == 1


def test_warm_start_progress_without_validation_prints_no_nan(tmp_path, capsys):
    spec_path = write_spec(tmp_path, clients=3, fractions=NO_VAL)
    assert main(["split", str(spec_path), "-o", str(tmp_path / "p")]) == 0
    capsys.readouterr()

    warm_start_fedavg.run(read_spec(spec_path), 0, tmp_path / "p", tmp_path / "ck",
                          tmp_path / "r", progress=True)

    out = capsys.readouterr().out
    progress = [e for e in map(events.parse, out.splitlines()) if e and e["event"] == "progress"]
    assert progress == [{"event": "progress", "round": 1, "rounds": 2},
                        {"event": "progress", "round": 2, "rounds": 2}]
    assert "NaN" not in out


def test_validate_preview_agrees_with_run_for_empty_personalization(tmp_path, capsys):
    assert main(["validate", str(write_spec(tmp_path))]) == 0
    empty = capsys.readouterr().out
    assert main(["validate", str(write_spec(tmp_path, personalization="[{name: ditto}]"))]) == 0
    ditto = capsys.readouterr().out

    assert "train_local" not in empty and "baselines 'local'" not in empty   # run skips both
    assert "evaluate_fairness   'fedavg' alone" in empty
    assert "train_local         local-only baseline" in ditto
    assert "baselines 'local' and 'fedavg'" in ditto


def test_run_graph_skips_train_local_for_empty_personalization(tmp_path):
    from pflpipe.pipelines.compiler import compile_pipeline

    empty = compile_pipeline(read_spec(write_spec(tmp_path)), tmp_path / "a.yaml").read_text()
    ditto = compile_pipeline(read_spec(write_spec(tmp_path, personalization="[{name: ditto}]",
                                                  name="d.yaml")), tmp_path / "b.yaml").read_text()

    assert "comp-train-local" not in empty and "comp-train-local" in ditto
