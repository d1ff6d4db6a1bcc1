"""The one rule every writing verb follows (`pflpipe.overwrite`): write where the directory or file
is missing, empty or the same command's own; refuse anything else unless --force."""

import json

import pytest

from pflpipe.cli import main
from pflpipe.layout import WRITTEN_JSON
from pflpipe.overwrite import OverwriteError, claim_dir, claim_file

TABLE = ("client,model,accuracy\n0,local,0.7\n0,fedavg,0.6\n0,x,0.8\n1,local,0.5\n1,fedavg,0.6\n"
         "1,x,0.9\n")


def test_claim_dir_replaces_exactly_what_the_same_writer_recorded(tmp_path):
    claim = claim_dir(tmp_path, "w", force=False)
    (tmp_path / "a.txt").write_text("1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("2")
    claim.record([tmp_path / "a.txt", tmp_path / "sub" / "b.txt"])

    claim_dir(tmp_path, "w", force=False)   # the same writer again: its entries are removed

    assert sorted(p.name for p in tmp_path.iterdir()) == [WRITTEN_JSON]


def test_claim_dir_refuses_another_writers_record_and_leaves_it(tmp_path):
    claim_dir(tmp_path, "w", force=False).record(["a.txt"])
    (tmp_path / "a.txt").write_text("1")

    with pytest.raises(OverwriteError, match=r"holds files \(a.txt\) that `v` did not write"):
        claim_dir(tmp_path, "v", force=False)
    assert (tmp_path / "a.txt").read_text() == "1"


def test_claim_dir_with_force_removes_only_the_foreign_names_the_writer_writes(tmp_path):
    for name in ("mine.txt", "report.md"):
        (tmp_path / name).write_text(name)
    (tmp_path / "kept.json").write_text("{}")

    claim_dir(tmp_path, "w", force=True, keep=("kept.json",), writes={"report.md"}.__contains__)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json", "mine.txt"]


def test_a_record_naming_paths_outside_the_directory_removes_nothing_outside(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "outside.txt").write_text("x")
    (tmp_path / "d" / WRITTEN_JSON).write_text(json.dumps(
        {"writer": "w", "entries": ["../outside.txt", "..", "a/b"]}))

    claim_dir(tmp_path / "d", "w", force=False)

    assert (tmp_path / "outside.txt").read_text() == "x"


def test_claim_file_accepts_its_own_text_and_refuses_other_text(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("OURS\n")
    claim_file(path, "w", force=False, ours=lambda text: text.startswith("OURS"))

    path.write_text("experiment: {name: t}\n")
    with pytest.raises(OverwriteError, match="p.yaml exists and `w` did not write it"):
        claim_file(path, "w", force=False, ours=lambda text: text.startswith("OURS"))
    claim_file(path, "w", force=True, ours=lambda text: False)


def test_report_into_its_own_directory_again_leaves_no_stale_figure(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0
    (out / "figures" / "stale.png").write_bytes(b"old")   # as if an older report wrote it

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0

    assert not (out / "figures" / "stale.png").exists()
    assert json.loads((out / WRITTEN_JSON).read_text()) == {
        "writer": "pflpipe report",
        "entries": ["figures", "pairwise.csv", "report.html", "report.json", "report.md"]}


def test_report_with_force_writes_into_a_runs_report_and_keeps_other_files(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("the run's")
    (out / "notes.txt").write_text("mine")

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 2
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out), "--force"]) == 0

    assert (out / "report.md").read_text() != "the run's"
    assert (out / "notes.txt").read_text() == "mine"


def test_compile_and_schema_replace_their_own_files(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("experiment: {name: t}\ndataset: {name: digits}\n"
                    "partition: {strategy: iid, n_clients: 3}\n")
    for _ in range(2):
        assert main(["compile", str(spec), "-o", str(tmp_path / "p.yaml")]) == 0
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0
    assert main(["schema", "--markdown", "-o", str(tmp_path / "s.json")]) == 0
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0

    assert main(["compile", str(spec), "-o", str(tmp_path / "s.json")]) == 2   # not .yaml
    assert main(["schema", "-o", str(tmp_path / "p.yaml")]) == 2                # compile's
    assert "`pflpipe schema` did not write it" in capsys.readouterr().err
