"""The one rule every writing verb follows (`pflpipe.overwrite`): pflpipe records what it wrote
(names and SHA-256); without --force it refuses when anything under the target that it did not
write, or that changed since, would be replaced or removed; with --force it replaces only its own
names and removes nothing else."""

import hashlib
import json

import pytest

from pflpipe.cli import main
from pflpipe.layout import WRITTEN_JSON, written_record
from pflpipe.overwrite import OverwriteError, claim_dir, claim_file

TABLE = ("client,model,accuracy\n0,local,0.7\n0,fedavg,0.6\n0,x,0.8\n1,local,0.5\n1,fedavg,0.6\n"
         "1,x,0.9\n")
SPEC = ("experiment: {{name: t, output_dir: {out}}}\ndataset: {{name: digits}}\n"
        "partition: {{strategy: iid, n_clients: 3}}\ntracking: {{enabled: false}}\n")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def written(tmp_path, writer="w"):
    """A directory `writer` wrote: a.txt and sub/b.txt, recorded."""
    claim = claim_dir(tmp_path, writer, force=False)
    (tmp_path / "a.txt").write_text("1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("2")
    claim.record([tmp_path / "a.txt", "sub"])
    return claim


# ---- the rule itself -----------------------------------------------------------------------------

def test_the_record_holds_every_file_and_its_hash(tmp_path):
    written(tmp_path)

    assert json.loads((tmp_path / WRITTEN_JSON).read_text()) == {
        "writer": "w", "files": {"a.txt": sha(b"1"), "sub/b.txt": sha(b"2")}}


def test_claim_dir_removes_exactly_what_the_same_writer_recorded_unchanged(tmp_path):
    written(tmp_path)

    claim_dir(tmp_path, "w", force=False)   # the same writer again: its files are removed

    assert sorted(p.name for p in tmp_path.iterdir()) == [WRITTEN_JSON]   # and emptied folders


@pytest.mark.parametrize("user_file", ["mine.txt", "sub/mine.txt", "new/deep/mine.txt"])
def test_a_user_file_at_the_top_or_in_a_subfolder_is_refused_and_nothing_is_removed(tmp_path,
                                                                                      user_file):
    written(tmp_path)
    (tmp_path / user_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / user_file).write_text("mine")

    with pytest.raises(OverwriteError, match=rf"holds files \({user_file.split('/deep')[0]}\) "
                                             "that `w` did not write"):
        claim_dir(tmp_path, "w", force=False)

    assert (tmp_path / user_file).read_text() == "mine"
    assert (tmp_path / "a.txt").read_text() == "1" and (tmp_path / "sub/b.txt").read_text() == "2"


def test_pythons_bytecode_cache_beside_a_written_module_is_neither_ours_nor_foreign(tmp_path):
    written(tmp_path)   # as an exported app that ran: sub/__pycache__/b.cpython-311.pyc
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\x00")

    claim_dir(tmp_path, "w", force=False).record([])

    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "sub" / "b.txt").exists()
    assert (tmp_path / "sub" / "__pycache__" / "b.cpython-311.pyc").exists()


def test_an_edited_file_is_refused_naming_the_edit(tmp_path):
    written(tmp_path)
    (tmp_path / "sub" / "b.txt").write_text("my edit")

    with pytest.raises(OverwriteError, match=r"holds files `w` wrote that were changed since "
                                             r"\(sub/b.txt\); writing there would"):
        claim_dir(tmp_path, "w", force=False)
    assert (tmp_path / "sub" / "b.txt").read_text() == "my edit"


def test_force_removes_only_the_writers_unchanged_files_and_the_record_leaves_the_rest(tmp_path):
    written(tmp_path)
    (tmp_path / "sub" / "b.txt").write_text("my edit")
    (tmp_path / "sub" / "mine.txt").write_text("mine")

    claim = claim_dir(tmp_path, "w", force=True)
    assert not (tmp_path / "a.txt").exists()                      # its own, unchanged: removed
    assert (tmp_path / "sub" / "b.txt").read_text() == "my edit"  # edited: the user's now
    (tmp_path / "a.txt").write_text("new")
    claim.record(["a.txt", "sub"])

    # the user's files never become the writer's: the next run refuses them again
    assert json.loads((tmp_path / WRITTEN_JSON).read_text())["files"] == {"a.txt": sha(b"new")}
    with pytest.raises(OverwriteError, match=r"\(sub\) that `w` did not write;"):
        claim_dir(tmp_path, "w", force=False)


def test_an_older_pflpipes_record_without_hashes_is_refused_saying_so(tmp_path):
    (tmp_path / "report.md").write_text("old")
    (tmp_path / WRITTEN_JSON).write_text(json.dumps({"writer": "w", "entries": ["report.md"]}))

    with pytest.raises(OverwriteError, match=r"\(report.md\) that `w` did not write \(its record "
                                             r"of them, from an older pflpipe, holds no hashes"):
        claim_dir(tmp_path, "w", force=False)
    assert (tmp_path / "report.md").read_text() == "old"


def test_claim_dir_refuses_another_writers_record_and_leaves_it(tmp_path):
    written(tmp_path, writer="w")

    with pytest.raises(OverwriteError, match=r"holds files \(a.txt, sub\) that `v` did not write"):
        claim_dir(tmp_path, "v", force=False)
    assert (tmp_path / "a.txt").read_text() == "1"


def test_a_record_naming_paths_outside_the_directory_removes_nothing_outside(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "outside.txt").write_text("x")
    (tmp_path / "d" / WRITTEN_JSON).write_text(json.dumps(
        {"writer": "w", "files": {"../outside.txt": sha(b"x"), "..": sha(b"x")}}))

    claim_dir(tmp_path / "d", "w", force=False)

    assert (tmp_path / "outside.txt").read_text() == "x"


def test_claim_dir_refuses_a_file_where_a_directory_is_meant(tmp_path):
    (tmp_path / "tiny.yaml").write_text("experiment: {name: t}\n")

    with pytest.raises(OverwriteError, match=r"-o .*tiny.yaml: is a file, and -o names a "
                                             r"directory; name a directory instead \(e.g. -o "):
        claim_dir(tmp_path / "tiny.yaml", "w", force=True)
    with pytest.raises(OverwriteError, match=r"tiny.yaml is a file, not a folder"):
        claim_dir(tmp_path / "tiny.yaml" / "figures", "w", force=True)


def test_claim_file_accepts_its_own_unchanged_file_and_refuses_an_edit_or_another(tmp_path):
    path = tmp_path / "p.yaml"
    claim = claim_file(path, "w", force=False)
    path.write_text("OURS\n")
    claim.record()
    assert claim_file(path, "w", force=False)                     # unchanged: ours

    path.write_text("OURS\n# my edit\n")
    with pytest.raises(OverwriteError, match="p.yaml exists and `w` wrote it, but it was "
                                             "changed since"):
        claim_file(path, "w", force=False)
    with pytest.raises(OverwriteError, match="p.yaml exists and `v` did not write it"):
        claim_file(path, "v", force=False)
    claim_file(path, "w", force=True)
    assert path.read_text() == "OURS\n# my edit\n"


def test_claim_file_refuses_a_path_below_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")

    with pytest.raises(OverwriteError, match=r"-o .*notes.txt/p.yaml: .*notes.txt is a file, not "
                                             r"a folder; name a file outside it"):
        claim_file(tmp_path / "notes.txt" / "p.yaml", "w", force=True)


# ---- every verb ----------------------------------------------------------------------------------

def test_report_into_its_own_directory_again_leaves_no_stale_figure(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0
    record = json.loads((out / WRITTEN_JSON).read_text())
    stale = out / "figures" / "client_accuracy_stale.png"       # as if an older report wrote it
    stale.write_bytes(b"old")
    record["files"]["figures/client_accuracy_stale.png"] = sha(b"old")
    (out / WRITTEN_JSON).write_text(json.dumps(record))

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0

    assert not stale.exists()
    files = json.loads((out / WRITTEN_JSON).read_text())["files"]
    assert {"pairwise.csv", "report.html", "report.json", "report.md"} < set(files)
    assert all(files[name] == sha((out / name).read_bytes()) for name in files)
    assert any(name.startswith("figures/") for name in files)


@pytest.mark.parametrize("mine", ["notes.txt", "figures/mine.png"])
def test_report_refuses_a_users_file_at_the_top_or_in_figures_and_force_keeps_it(tmp_path,
                                                                                  capsys, mine):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0
    (out / mine).write_bytes(b"mine")

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 2
    assert f"{out} holds files ({mine}) that `pflpipe report` did not write" in (
        capsys.readouterr().err)
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out), "--force"]) == 0

    assert (out / mine).read_bytes() == b"mine"
    assert (out / "report.json").is_file()


def test_report_refuses_an_edited_report_and_force_replaces_only_that_name(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 0
    (out / "report.md").write_text("my edit")

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 2
    assert "holds files `pflpipe report` wrote that were changed since (report.md)" in (
        capsys.readouterr().err)
    assert (out / "report.md").read_text() == "my edit"
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out), "--force"]) == 0
    assert (out / "report.md").read_text() != "my edit"


def test_report_with_force_writes_into_a_runs_report_and_keeps_other_files(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    (out / "report.md").write_text("the run's")
    (out / "notes.txt").write_text("mine")
    (out / "figures" / "paper_fig1.png").write_bytes(b"mine")

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out)]) == 2
    assert main(["report", str(tmp_path / "t.csv"), "-o", str(out), "--force"]) == 0

    assert (out / "report.md").read_text() != "the run's"
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "figures" / "paper_fig1.png").read_bytes() == b"mine"


def test_report_to_a_file_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TABLE)
    (tmp_path / "tiny.yaml").write_text("x: 1\n")

    assert main(["report", str(tmp_path / "t.csv"), "-o", str(tmp_path / "tiny.yaml")]) == 2

    err = capsys.readouterr().err
    assert "tiny.yaml: is a file, and -o names a directory" in err and "Traceback" not in err
    assert (tmp_path / "tiny.yaml").read_text() == "x: 1\n"


@pytest.mark.parametrize(("fmt", "mine"), [("flower", "partition_0/notes.txt"),
                                           ("pfllib", "train/my_own_data.csv")])
def test_export_refuses_a_users_file_in_a_subfolder_and_force_keeps_it(tmp_path, capsys, fmt,
                                                                        mine):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    target = tmp_path / "export"
    assert main(["split", str(spec), "--export", fmt, str(target)]) == 0
    (target / mine).write_text("mine")
    (target / "NOTES.md").write_text("mine too")

    assert main(["split", str(spec), "--export", fmt, str(target)]) == 2
    assert f"({'NOTES.md, ' + mine}) that `pflpipe split --export` did not write" in (
        capsys.readouterr().err)
    assert (target / mine).read_text() == "mine"
    assert main(["split", str(spec), "--export", fmt, str(target), "--force"]) == 0

    assert (target / mine).read_text() == "mine"
    assert (target / "NOTES.md").read_text() == "mine too"
    assert main(["split", str(spec), "--export", fmt, str(target)]) == 2   # still the user's


def test_compile_refuses_an_edited_pipeline_and_force_replaces_it(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    pipe = tmp_path / "pipe.yaml"
    for _ in range(2):   # its own file, unchanged: replaced
        assert main(["compile", str(spec), "-o", str(pipe)]) == 0
    assert (tmp_path / written_record("pipe.yaml")).is_file()
    edited = pipe.read_text() + "# my edit\n"   # the first line is still KFP's
    pipe.write_text(edited)

    assert main(["compile", str(spec), "-o", str(pipe)]) == 2
    assert f"{pipe} exists and `pflpipe compile` wrote it, but it was changed since" in (
        capsys.readouterr().err)
    assert pipe.read_text() == edited
    assert main(["compile", str(spec), "-o", str(pipe), "--force"]) == 0
    assert pipe.read_text() != edited


@pytest.mark.parametrize("verb", ["compile", "schema"], ids=["pipeline", "spec-schema"])
def test_compile_and_schema_into_a_missing_folder_make_it_and_say_so(tmp_path, capsys, verb):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    out = tmp_path / "NEWDIR" / "deeper" / "p.yaml"

    args = ["compile", str(spec)] if verb == "compile" else ["schema"]
    assert main([*args, "-o", str(out)]) == 0

    assert (f"created the folder {out.parent}/ (it did not exist)"
            in capsys.readouterr().out.splitlines())
    assert out.is_file() and (out.parent / written_record("p.yaml")).is_file()


def test_compile_and_schema_replace_their_own_files_and_refuse_each_others(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    assert main(["compile", str(spec), "-o", str(tmp_path / "p.yaml")]) == 0
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0
    assert main(["schema", "--markdown", "-o", str(tmp_path / "s.json")]) == 0
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0

    assert main(["compile", str(spec), "-o", str(tmp_path / "s.json")]) == 2   # not .yaml
    assert main(["schema", "-o", str(tmp_path / "p.yaml")]) == 2                # compile's
    assert "`pflpipe schema` did not write it" in capsys.readouterr().err


def test_schema_refuses_an_edited_schema(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["schema", "-o", str(out)]) == 0
    out.write_text(out.read_text().replace('"pflpipe spec"', '"my spec"'))

    assert main(["schema", "-o", str(out)]) == 2

    assert f"{out} exists and `pflpipe schema` wrote it, but it was changed since" in (
        capsys.readouterr().err)
    assert '"my spec"' in out.read_text()


def test_schema_with_force_replaces_an_edited_schema(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["schema", "-o", str(out)]) == 0
    out.write_text("my edit")

    assert main(["schema", "-o", str(out), "--force"]) == 0

    assert '"title": "pflpipe spec"' in out.read_text()
    assert main(["schema", "-o", str(out)]) == 0   # recorded again: its own, unchanged


@pytest.mark.parametrize("change", ["clients/notes.txt", "manifest.json"])
def test_split_refuses_a_users_file_in_clients_or_an_edited_manifest_and_force_keeps_notes(
        tmp_path, capsys, change):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    out = tmp_path / "part"
    assert main(["split", str(spec), "-o", str(out)]) == 0
    (out / change).write_text("mine")

    assert main(["split", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert (f"({change}) that `pflpipe split` did not write" in err if change.startswith("clients")
            else f"`pflpipe split` wrote that were changed since ({change})" in err)
    assert (out / change).read_text() == "mine"
    assert main(["split", str(spec), "-o", str(out), "--force"]) == 0

    assert ((out / change).read_text() == "mine") == change.startswith("clients")


def test_export_refuses_an_edited_file_and_force_replaces_only_that_name(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=tmp_path / "results"))
    target = tmp_path / "export"
    assert main(["split", str(spec), "--export", "flower", str(target)]) == 0
    (target / "partitions.json").write_text("my edit")

    assert main(["split", str(spec), "--export", "flower", str(target)]) == 2
    assert ("wrote that were changed since (partitions.json)" in capsys.readouterr().err)
    assert (target / "partitions.json").read_text() == "my edit"
    assert main(["split", str(spec), "--export", "flower", str(target), "--force"]) == 0
    assert json.loads((target / "partitions.json").read_text())["num_partitions"] == 3
