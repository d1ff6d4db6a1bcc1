"""The whole checkout passes ruff with the configuration of pyproject.toml (`[tool.ruff]`)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed; install the dev extra (pip install -e '.[dev]')",
                    pytrace=False)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"`ruff check .` failed:\n{done.stdout}{done.stderr}"
