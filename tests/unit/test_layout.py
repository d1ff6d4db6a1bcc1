"""`pflpipe.layout` owns the files on disk: no other module spells one of its file names."""

import ast
import functools
import re
from pathlib import Path

import pytest

from pflpipe import layout

REPO = Path(__file__).resolve().parents[2]
#: The Flower/PFLlib app `pflpipe split --export` copies out: it runs without pflpipe, so it
#: spells its own copies of layout's names (`test_the_exported_app_spells_layouts_names`).
APP = REPO / "pflpipe" / "data" / "flower_app"
CODE = sorted(p for folder in ("pflpipe", "components", "pipelines")
              for p in (REPO / folder).rglob("*.py") if APP not in p.parents)
#: Every file name layout owns (names with a suffix; bare folder names are ordinary words), and
#: the round and state files (``round_0012.pt``, ``f"round_{r:04d}.pt"``, ``round_*.pt``).
NAMES = sorted({re.escape(value) for name, value in vars(layout).items() if name.isupper()
                for value in (value if isinstance(value, tuple) else (value,))
                if isinstance(value, str) and "." in value}
               | {r"\b(round|state)_(\d|\{|\*|$)"})
#: A whole file name (or an f-string's pattern of one, ``{}`` for each value) of a kind pflpipe
#: writes; a bare suffix (``.npz`` in a check of the user's path) or a glob is not one.
FILE_NAME = re.compile(r"^[^\s*]*[\w}]\.(csv|json|jsonl|pt|pkl|md|png|html|log|npz|yaml|toml)$")
#: File names spelled outside layout on purpose, and why.
NOT_OURS = {
    ("pflpipe/cli/report_verb.py", "TABLE.csv"): "an argument's metavar",
    # other tools' layouts (PFLlib's train/<k>.npz, Flower's partition_<k>/<split>.npz), read
    # from the user's data and written by the export in the tools' own format
    ("pflpipe/data/client_files.py", "{}.npz"): "PFLlib's and Flower's client files",
    ("pflpipe/data/export.py", "{}.npz"): "PFLlib's and Flower's client files",
    ("pflpipe/data/files.py", "data.pkl"): "the pickle inside torch.save's archive",
    # paths inside an MLflow run's artifacts (the tracking store), not a directory on disk
    ("pflpipe/tracking/mlflow_tracker.py", "{}.pt"): "a state_dict artifact of an MLflow run",
    ("pflpipe/tracking/runs.py", "spec.yaml"): "an artifact of the MLflow parent run",
    ("pflpipe/tracking/runs.py", "spec_resolved.yaml"): "an artifact of the MLflow parent run",
}


def _patterns(path: Path) -> list[str]:
    """Every string literal of a module's code, an f-string as its pattern (``{}`` per value)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for value in node.values}
    return [("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
             if isinstance(node, ast.JoinedStr) else node.value) for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            or (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in parts)]


@functools.cache
def _strings(path: Path) -> list[str]:
    """Every string literal of a module's code (f-string parts included), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_layout_owns_at_least_the_contract_files():
    contract = ("results.csv", "history.csv", "summary.md", "shard.json", "progress.json",
                "manifest.json", "collected.json")
    assert {re.escape(name) for name in contract} <= set(NAMES)
    assert layout.round_key(12) == "round_0012.pt" and layout.state_key(3) == "state_0003.pt"


@pytest.mark.parametrize("name", NAMES)
def test_a_file_name_is_spelled_in_layout_only(name):
    # Execute: the modules whose code (not docstrings) spells the name
    spelled = [str(path.relative_to(REPO)) for path in CODE
               if any(re.search(name, text) for text in _strings(path))]

    # Assert
    assert spelled == ["pflpipe/layout.py"]


def test_layout_owns_the_worker_task_the_events_file_and_the_export_package():
    owned = ("task.pkl", "result.pt", "error.pkl", "events.jsonl", "pipeline.log",
             "reproduce.json", "initial_weights.pt", ".pflpipe-written.json", "report.json")
    assert {re.escape(name) for name in owned} <= set(NAMES)


def test_no_module_but_layout_spells_a_file_name_of_its_own():
    """Every literal shaped like a file name (or an f-string pattern of one) is layout's."""
    # Execute: (module, literal) of every file-name literal outside layout
    spelled = {(str(path.relative_to(REPO)), text) for path in CODE
               if path != REPO / "pflpipe" / "layout.py"
               for text in _patterns(path) if FILE_NAME.match(text)}

    # Assert: only the names that are not pflpipe's files, each with its reason
    assert spelled == set(NOT_OURS)


def test_the_file_name_sweep_sees_plain_and_formatted_names(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('A = "results.csv"\nB = f"{x}.pt"\nC = ".npz"\nD = "*.json"\n'
                      'E = f"client {k} has no {split} split"\n')

    assert [t for t in _patterns(module) if FILE_NAME.match(t)] == ["results.csv", "{}.pt"]


def test_the_exported_app_spells_layouts_names():
    """The app runs without pflpipe; its copies of the names must be layout's."""
    app = {text for path in APP.glob("*.py") for text in _patterns(path)}

    assert {layout.REPRODUCE_JSON, layout.INITIAL_WEIGHTS_PT, *layout.APP_OUTPUTS} <= app


def test_report_figures_are_file_safe_and_in_figures():
    assert layout.report_figure("qoi", "test") == "figures/qoi_test.png"
    assert layout.report_figure("diagnostics", "flow · paper-eq5") == \
        "figures/diagnostics_flow_paper-eq5.png"
    assert layout.report_figure("accuracy_vs_samples") == "figures/accuracy_vs_samples.png"


def test_round_of_reads_back_what_round_key_writes():
    assert [layout.round_of(layout.round_key(r)) for r in (0, 7, 12345)] == [0, 7, 12345]
    assert layout.round_of(layout.state_key(7)) is None
    assert layout.round_of(layout.PROGRESS_JSON) is None


def test_rounds_in_lists_a_checkpoint_directory_in_round_order(tmp_path):
    for key in (layout.round_key(10), layout.round_key(2), layout.state_key(10),
                layout.PROGRESS_JSON):
        (tmp_path / key).write_bytes(b"")

    assert layout.rounds_in(tmp_path) == [2, 10]
