"""The hostile corpus, issue 46's classes: the "data lost" cases of the one overwrite rule (a
user's file below the target, an edited file, `--force`) and the "unclear" messages that were a
library's raw text or blamed the wrong field. Each runs the real command line in-process and is
judged by the corpus's `hostile` fixture (exit code, the named field and fix, no traceback, no
"unexpected", every kept byte intact); on main each of them failed.
"""

from pathlib import Path

import numpy as np
import pytest
import test_corpus
import torch
from test_corpus import NEVER, TABLE, Case
from test_validate import BASE

OUT = "  name: t\n  output_dir: {tmp}/out\n"


def spec(extra: str = "", base: str = BASE):
    """A digits spec writing under {tmp}/out, untracked, plus `extra` lines."""
    return lambda tmp: (tmp / "spec.yaml").write_text(
        base.replace("  name: t\n", OUT.format(tmp=tmp), 1) + "tracking: {enabled: false}\n"
        + extra)


def validate(name: str, extra: str, fragments: tuple[str, ...], *sets: str) -> Case:
    setting = [arg for value in sets for arg in ("--set", value)]
    return Case(name, ("validate", "{tmp}/spec.yaml", *setting), fragments, spec(extra))


def report_written(mine: str = "", edit: str = ""):
    """A report `pflpipe report` wrote into {tmp}/rep, then the user's file or edit in it."""
    def make(tmp: Path) -> None:
        from pflpipe.cli import main

        (tmp / "t.csv").write_bytes(TABLE)
        assert main(["report", str(tmp / "t.csv"), "-o", str(tmp / "rep")]) == 0
        if mine:
            (tmp / "rep" / mine).write_bytes(b"mine")
        if edit:
            (tmp / "rep" / edit).write_text("my edit")
    return make


def export_written(tmp: Path) -> None:
    from pflpipe.cli import main

    spec()(tmp)
    assert main(["split", str(tmp / "spec.yaml"), "--export", "flower", str(tmp / "fl")]) == 0
    (tmp / "fl" / "partition_0" / "notes.txt").write_text("mine")


def compiled_and_edited(tmp: Path) -> None:
    from pflpipe.cli import main

    spec()(tmp)
    assert main(["compile", str(tmp / "spec.yaml"), "-o", str(tmp / "p.yaml")]) == 0
    (tmp / "p.yaml").write_text((tmp / "p.yaml").read_text() + "# my edit\n")


def newcomer_beside(target: str):
    """What personalize-new needs before it trains, and a file where its -o folder goes."""
    def make(tmp: Path) -> None:
        spec()(tmp)
        (tmp / "partition").mkdir()
        (tmp / "checkpoints").mkdir()
        np.savez(tmp / "new.npz", x=np.zeros((20, 64)), y=np.arange(20) % 10)
        (tmp / target).write_text("x: 1\n")
    return make


def pt_protocol_5(tmp: Path) -> None:
    class Payload:
        def __reduce__(self):
            return (eval, ("1",))

    from test_corpus import ARRAYS_SPEC

    torch.save({"x": Payload(), "y": np.arange(3)}, tmp / "d.pt", pickle_protocol=5)
    (tmp / "spec.yaml").write_text(ARRAYS_SPEC.format(tmp=tmp, file="d.pt"))


def utf16(name: str, text: str):
    return lambda tmp: (tmp / name).write_bytes(text.encode("utf-16"))


QUOTE = "quote it"
UNCLEAR = [
    # ---- the one overwrite rule: below the top, edits, --force -----------------------------
    Case("lost-report-user-file-in-subfolder", ("report", "{tmp}/t.csv", "-o", "{tmp}/rep"),
         ("{tmp}/rep holds files (figures/mine.png) that `pflpipe report` did not write",
          "--force"), report_written(mine="figures/mine.png"), kept=("{tmp}/rep",)),
    Case("lost-report-force-keeps-subfolder-file",
         ("report", "{tmp}/t.csv", "-o", "{tmp}/rep", "--force"), (),
         report_written(mine="figures/paper_fig1.png"), code=0,
         kept=("{tmp}/rep/figures/paper_fig1.png",)),
    Case("lost-report-edited-file", ("report", "{tmp}/t.csv", "-o", "{tmp}/rep"),
         ("{tmp}/rep holds files `pflpipe report` wrote that were changed since (report.md)",),
         report_written(edit="report.md"), kept=("{tmp}/rep",)),
    Case("lost-export-user-file-in-subfolder",
         ("split", "{tmp}/spec.yaml", "--export", "flower", "{tmp}/fl"),
         ("{tmp}/fl holds files (partition_0/notes.txt) that `pflpipe split --export` did not "
          "write",), export_written, kept=("{tmp}/fl",)),
    Case("lost-export-force-keeps-subfolder-file",
         ("split", "{tmp}/spec.yaml", "--export", "flower", "{tmp}/fl", "--force"), (),
         export_written, code=0, kept=("{tmp}/fl/partition_0/notes.txt",)),
    Case("lost-compile-edited-pipeline", ("compile", "{tmp}/spec.yaml", "-o", "{tmp}/p.yaml"),
         ("{tmp}/p.yaml exists and `pflpipe compile` wrote it, but it was changed since",
          "pass --force to replace it"), compiled_and_edited, kept=("{tmp}/p.yaml",)),
    # ---- a file where a folder is meant, a folder that is not there: before any work --------
    Case("path-run-results-is-a-file", ("run", "{tmp}/spec.yaml", "--results", "{tmp}/t.yaml"),
         ("--results {tmp}/t.yaml: is a file, and --results names a directory",),
         newcomer_beside("t.yaml"), kept=("{tmp}/t.yaml",)),
    Case("path-personalize-new-output-is-a-file",
         ("personalize-new", "{tmp}/spec.yaml", "--client-data", "{tmp}/new.npz", "--partition",
          "{tmp}/partition", "--checkpoints", "{tmp}/checkpoints", "-o", "{tmp}/t.yaml"),
         ("-o {tmp}/t.yaml: is a file, and -o names a directory",), newcomer_beside("t.yaml"),
         kept=("{tmp}/t.yaml",)),
    # ---- --set values PyYAML cannot read: said in the --set's terms -------------------------
    validate("set-unclosed-flow", "",
             ("--set federation={rounds: 2: the value is not valid YAML: expected ',' or '}'",
              "check its brackets and quotes"), "federation={rounds: 2"),
    validate("set-undefined-alias", "",
             ("--set federation.rounds=*x: * starts a YAML alias",), "federation.rounds=*x"),
    validate("set-python-tag", "",
             ("YAML tags (!!...) are not allowed in a --set value",),
             "experiment.name=!!python/object/apply:os.system [ls]"),
    validate("set-newline-in-value", "",
             ("--set experiment.name=a\\nseeds: [5]: the value runs over a line break into "
              "another setting (seeds)",), "experiment.name=a\nseeds: [5]"),
    validate("set-replaced-section-missing-field", "",
             ("(--set dataset={name: arrays}): dataset.path: required field missing",),
             "dataset={name: arrays}"),
    # ---- YAML 1.1 words: booleans and dates ---------------------------------------------------
    validate("yaml11-label-on", "personalization: [{name: fedper, label: on}]\n",
             ("{tmp}/spec.yaml:10: personalization[0].label: on is true in YAML 1.1 but text in "
              "YAML 1.2", QUOTE)),
    validate("yaml11-set-experiment-yes", "",
             ("--set tracking.experiment=yes: yes is true in YAML 1.1", QUOTE),
             "tracking.experiment=yes"),
    validate("yaml11-set-divergence-off", "",
             ("--set federation.divergence_factor=off: off is false in YAML 1.1",
              "write null to turn the divergence check off"),
             "federation.divergence_factor=off"),
    Case("yaml11-date-name", ("validate", "{tmp}/spec.yaml"),
         ("{tmp}/spec.yaml:2: experiment.name: 2024-01-01 is a date in YAML 1.1 but text in "
          "YAML 1.2; quote it ('2024-01-01')",),
         lambda tmp: (tmp / "spec.yaml").write_text(BASE.replace("name: t", "name: 2024-01-01"))),
    # ---- encodings, shapes of a section -------------------------------------------------------
    Case("path-spec-utf16", ("validate", "{tmp}/spec.yaml"),
         ("{tmp}/spec.yaml: the spec is UTF-16 text; save it as UTF-8",),
         utf16("spec.yaml", BASE)),
    Case("table-utf16", ("report", "{tmp}/t.csv", "-o", "{tmp}/out"),
         ("{tmp}/t.csv: the results table is UTF-16 text; save it as UTF-8",),
         utf16("t.csv", TABLE.decode())),
    validate("personalization-names-not-mappings", "personalization: [fedper, ditto]\n",
             ("personalization[0]: an entry is a mapping, not a name (got 'fedper'); write "
              "{name: fedper}",)),
    Case("data-pt-saved-with-protocol-5", ("split", "{tmp}/spec.yaml"),
         ("{tmp}/d.pt: holds a Python object (builtins.eval)", "never unpickles objects"),
         pt_protocol_5),
    # ---- services named by the spec: refused in validate, or before any stage ----------------
    validate("tracking-uri-sqlite-in-memory", "",
             ("tracking.uri: is an in-memory sqlite database", "sqlite:///mlflow.db"),
             "tracking={uri: 'sqlite://'}"),
    validate("tracking-uri-without-scheme", "",
             ("tracking.uri: has no scheme (got 'mlflow.db')",), "tracking={uri: mlflow.db}"),
    validate("storage-endpoint-without-scheme", "",
             ("storage.endpoint_url: has no scheme (got 'minio:9000'); S3 speaks HTTP",),
             "storage={kind: s3, bucket: abc, endpoint_url: 'minio:9000'}"),
    validate("storage-endpoint-ftp", "",
             ("storage.endpoint_url: has the scheme ftp://", "http://minio:9000"),
             "storage={kind: s3, bucket: abc, endpoint_url: 'ftp://minio:9000'}"),
    Case("tracking-uri-mssql-without-driver",
         ("run", "{tmp}/spec.yaml", "--set", "tracking={enabled: true, uri: "
          "'mssql://u@127.0.0.1:1/db'}"),
         ("tracking URI 'mssql://u@127.0.0.1:1/db': mssql:// needs the database driver pyodbc, "
          "which is not installed; `pip install pyodbc`",), spec(),
         never=(*NEVER, "ModuleNotFoundError")),
]


@pytest.mark.corpus
@pytest.mark.parametrize("case", UNCLEAR, ids=[case.name for case in UNCLEAR])
def test_issue_46_cases_are_clear_and_lose_nothing(tmp_path, capsys, hostile, case):
    test_corpus.test_bad_input_exits_with_its_code_and_a_clear_message(tmp_path, capsys, hostile,
                                                                       case)


@pytest.mark.corpus
def test_a_custom_model_whose_constructor_raises_is_blamed_on_the_class(tmp_path, capsys,
                                                                         monkeypatch, hostile):
    (tmp_path / "mymodel.py").write_text(
        "from torch import nn\n\n\nclass Broken(nn.Module):\n"
        "    def __init__(self, in_shape, n_classes):\n        super().__init__()\n"
        "        raise RuntimeError('needs CUDA')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec("model: {architecture: custom, path: 'mymodel:Broken'}\n")(tmp_path)
    case = Case("model-constructor-raises", ("validate", "{tmp}/spec.yaml"),
                ("model.path: the constructor of 'mymodel:Broken' raised RuntimeError: needs "
                 "CUDA ({tmp}/mymodel.py:7)", "fix the class"),
                never=(*NEVER, "model.kwargs:"))

    test_corpus.test_bad_input_exits_with_its_code_and_a_clear_message(tmp_path, capsys, hostile,
                                                                       case)
