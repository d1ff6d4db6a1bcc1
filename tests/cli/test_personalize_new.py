"""`pflpipe personalize-new`: a client joining after training gets a teacher and a student."""

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from pflpipe.cli import main
from pflpipe.spec import read_spec
from pflpipe.stages import partition_data, warm_start_fedavg

SPEC = """\
experiment: {{name: newcomer, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 3}}
federation: {{rounds: 4, lr: 0.1}}
distillation: {{lambdas: [0, 0.5], temperatures: [1, 5], epochs: 2}}
engine: {{device: cpu}}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("newcomer")
    path = root / "spec.yaml"
    path.write_text(SPEC.format(out=root / "results"))
    spec = read_spec(path)
    base = root / "work"
    partition_data.run(spec, 0, base / "partition")
    warm_start_fedavg.run(spec, 0, base / "partition", base / "checkpoints", base / "fedavg")
    # where a finished `pflpipe run` says its partition and checkpoints are (docs/contracts.md)
    latest = root / "results" / "latest" / "seed-0"
    latest.mkdir(parents=True)
    (latest / "sources.json").write_text(json.dumps(
        {"partition": str(base / "partition"), "checkpoints": str(base / "checkpoints")}))
    return root, path


def newcomer(root):
    """The newcomer's data: 60 digits of classes 2 and 5."""
    digits = load_digits()
    keep = np.isin(digits.target, [2, 5])
    np.savez(root / "client.npz", x=digits.images[keep][:60].astype(np.float32),
             y=digits.target[keep][:60])


def test_personalize_new_picks_a_stored_round_and_distils_it(trained, capsys):
    root, spec = trained
    newcomer(root)

    code = main(["personalize-new", str(spec), "--client-data", str(root / "client.npz"),
                 "-o", str(root / "out")])

    assert code == 0, capsys.readouterr().err
    teacher = json.loads((root / "out" / "teacher.json").read_text())
    losses = {int(r): v for r, v in teacher["val_loss_by_round"].items()}
    assert teacher["round"] == min((r for r in losses if r > 0), key=lambda r: (losses[r], r))
    grid = (root / "out" / "grid.csv").read_text().splitlines()
    assert len(grid) == 1 + 4                      # header + 2 λ × 2 T
    assert (root / "out" / "model.pt").is_file()
    out = capsys.readouterr().out
    assert "student:  λ = " in out and "**" not in out  # plain text
    # no runner reads a verb's output: its stage's notices are text, not tagged JSON lines
    assert "pflpipe-event" not in out and "\nnote: " in "\n" + out and "torch thread" in out


def test_personalize_new_rejects_samples_of_another_shape(trained, capsys):
    root, spec = trained
    np.savez(root / "bad.npz", x=np.zeros((20, 5), np.float32), y=np.zeros(20, np.int64))

    code = main(["personalize-new", str(spec), "--client-data", str(root / "bad.npz")])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "do not match the dataset's input shape (1, 8, 8)" in err


def test_personalize_new_names_a_missing_checkpoint_directory(trained, tmp_path, capsys):
    root, spec = trained

    code = main(["personalize-new", str(spec), "--client-data", str(root / "client.npz"),
                 "--checkpoints", str(tmp_path / "nowhere")])

    assert code == 2
    assert "--checkpoints" in capsys.readouterr().err


def test_personalize_new_without_a_finished_run_says_what_to_do(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    np.savez(tmp_path / "client.npz", x=np.zeros((20, 8, 8), np.float32),
             y=np.zeros(20, np.int64))

    code = main(["personalize-new", str(spec), "--client-data", str(tmp_path / "client.npz")])

    err = capsys.readouterr().err
    assert code == 2 and "no finished `pflpipe run` of this spec with seed 0" in err
    assert "--partition and --checkpoints" in err


def test_the_warm_start_hash_moves_with_what_made_the_checkpoints_only(tmp_path):
    from pflpipe.spec import parse_spec

    base = parse_spec(SPEC.format(out=tmp_path))
    edited = parse_spec(SPEC.format(out=tmp_path).replace("rounds: 4, lr: 0.1",
                                                          "rounds: 8, lr: 0.05"))
    elsewhere = parse_spec(SPEC.format(out=tmp_path / "other").replace(
        "epochs: 2}", "epochs: 3}") + "evaluation: {selection: last_round}\n")

    assert edited.warm_start_hash() != base.warm_start_hash()
    assert elsewhere.warm_start_hash() == base.warm_start_hash()  # same partition, warm start


def test_personalize_new_refuses_the_checkpoints_of_a_run_made_from_another_spec(tmp_path, capsys):
    # The spec was edited (8 rounds at lr 0.05) after the run that made the latest checkpoints.
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results").replace("rounds: 4, lr: 0.1",
                                                                  "rounds: 8, lr: 0.05"))
    latest = tmp_path / "results" / "latest" / "seed-0"
    latest.mkdir(parents=True)
    made_by = read_spec_text(SPEC.format(out=tmp_path / "results")).warm_start_hash()
    (latest / "sources.json").write_text(json.dumps(
        {"partition": str(tmp_path), "checkpoints": str(tmp_path), "warm_start_hash": made_by}))
    np.savez(tmp_path / "client.npz", x=np.zeros((20, 8, 8), np.float32),
             y=np.zeros(20, np.int64))

    code = main(["personalize-new", str(spec), "--client-data", str(tmp_path / "client.npz")])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert (f"the latest run in {tmp_path / 'results'} was made from another spec: its dataset, "
            f"partition, model, federation sections differ from {spec}'s (warm-start hash "
            f"{made_by}, ") in err
    assert "pass --partition and --checkpoints to use that run's models knowingly" in err


def read_spec_text(text: str):
    from pflpipe.spec import parse_spec

    return parse_spec(text)
def test_personalize_new_to_a_file_is_refused_before_it_trains(trained, capsys):
    root, spec = trained
    newcomer(root)
    (root / "tiny.yaml").write_text("x: 1\n")

    code = main(["personalize-new", str(spec), "--client-data", str(root / "client.npz"),
                 "-o", str(root / "tiny.yaml")])

    captured = capsys.readouterr()
    assert code == 2 and "tiny.yaml: is a file, and -o names a directory" in captured.err
    assert "teacher" not in captured.out   # nothing was trained first
    assert (root / "tiny.yaml").read_text() == "x: 1\n"


def test_personalize_new_again_refuses_a_users_file_or_an_edit_and_force_keeps_them(trained,
                                                                                   capsys):
    root, spec = trained
    newcomer(root)
    args = ["personalize-new", str(spec), "--client-data", str(root / "client.npz"),
            "-o", str(root / "again")]
    assert main(args) == 0
    assert main(args) == 0                         # its own files, unchanged: replaced
    (root / "again" / "summary.md").write_text("my edit")
    (root / "again" / "plots").mkdir()
    (root / "again" / "plots" / "mine.png").write_bytes(b"mine")

    assert main(args) == 2
    err = capsys.readouterr().err
    assert ("again holds files (plots) that `pflpipe personalize-new` did not write and files "
            "`pflpipe personalize-new` wrote that were changed since (summary.md)") in err
    assert main([*args, "--force"]) == 0

    assert (root / "again" / "plots" / "mine.png").read_bytes() == b"mine"
    assert (root / "again" / "summary.md").read_text() != "my edit"   # its own name: replaced
