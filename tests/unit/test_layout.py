"""`pflpipe.layout` owns the files on disk: no other module spells one of its file names."""

import ast
import functools
import re
from pathlib import Path

import pytest

from pflpipe import layout

REPO = Path(__file__).resolve().parents[2]
CODE = sorted(p for folder in ("pflpipe", "components", "pipelines")
              for p in (REPO / folder).rglob("*.py"))
#: Every file name layout owns (names with a suffix; bare folder names are ordinary words), and
#: the round and state files (``round_0012.pt``, ``f"round_{r:04d}.pt"``, ``round_*.pt``).
NAMES = sorted({re.escape(value) for name, value in vars(layout).items()
                if name.isupper() and isinstance(value, str) and "." in value}
               | {r"\b(round|state)_(\d|\{|\*|$)"})


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


def test_round_of_reads_back_what_round_key_writes():
    assert [layout.round_of(layout.round_key(r)) for r in (0, 7, 12345)] == [0, 7, 12345]
    assert layout.round_of(layout.state_key(7)) is None
    assert layout.round_of(layout.PROGRESS_JSON) is None


def test_rounds_in_lists_a_checkpoint_directory_in_round_order(tmp_path):
    for key in (layout.round_key(10), layout.round_key(2), layout.state_key(10),
                layout.PROGRESS_JSON):
        (tmp_path / key).write_bytes(b"")

    assert layout.rounds_in(tmp_path) == [2, 10]
