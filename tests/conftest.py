"""Shared fixtures. Tests run quiet (no progress bars) and never reach the network."""

import builtins
import os

import pytest
from verdicts import VERDICTS, judge

os.environ.setdefault("CI", "true")
os.environ.setdefault("MLFLOW_SKIP_PIP_REQUIREMENTS_CHECK", "true")
#: Python's own print, as the session starts.
PRINT = builtins.print


@pytest.fixture(autouse=True)
def _print_as_it_was():
    """Put back `builtins.print` after a test that ran kfp.local itself (not through `pflpipe run`,
    which does so): kfp.local swaps it per task, and a ParallelFor's tasks restore it out of order,
    leaving later output of the session indented (pflpipe.pipelines.local_runner._routed).
    """
    yield
    builtins.print = PRINT


@pytest.fixture(scope="session")
def test_device() -> str:
    """The engine device of the ds3 partitions that the batched == sequential tests train on:
    PFLPIPE_TEST_DEVICE (cpu unless set; `cuda` runs them on a GPU, which CI never has).
    """
    return os.environ.get("PFLPIPE_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session", params=[
    pytest.param(False, id="eager"), pytest.param(True, id="compiled", marks=pytest.mark.compile)])
def compiled(request) -> bool:
    """Whether the batched trainer of a batched == sequential test compiles its steps.

    The compiled variant runs only with PFLPIPE_TEST_COMPILE=1: compiling every algorithm's steps
    takes minutes on a 2-core CPU. tests/engine/test_compiled.py always runs.
    """
    return request.param


def pytest_collection_modifyitems(config, items):
    """Skip the `compile` tests unless PFLPIPE_TEST_COMPILE=1."""
    if os.environ.get("PFLPIPE_TEST_COMPILE") == "1":
        return
    skip = pytest.mark.skip(reason="compiled variant: set PFLPIPE_TEST_COMPILE=1 to run it")
    for item in items:
        if "compile" in item.keywords:
            item.add_marker(skip)


# ---- the hostile corpus: every bad input and fault, judged and tallied ---------------------------
@pytest.fixture
def hostile(request):
    """Return ``check(code, err, seconds, expected=..., fragments=..., never=..., lost=...)``.

    It records the case's verdict for the tally that `pytest_terminal_summary` prints and fails
    the test unless the verdict is "ok".
    """
    def check(code: int, err: str, seconds: float, **expectations) -> None:
        verdict = judge(code, err, seconds, **expectations)
        request.node.user_properties.append(("corpus", verdict))
        assert verdict == "ok", (f"{verdict}: exit {code} after {seconds:.1f} s; expected "
                                 f"{expectations}; stderr:\n{err}")

    return check


def pytest_terminal_summary(terminalreporter):
    """Print the hostile corpus's tally when corpus cases ran (`-m corpus` runs them all)."""
    verdicts = [value for kind in ("passed", "failed") for report in
                terminalreporter.stats.get(kind, []) if report.when == "call"
                for key, value in report.user_properties if key == "corpus"]
    if not verdicts:
        return
    counts = {verdict: verdicts.count(verdict) for verdict in VERDICTS}
    terminalreporter.write_line(
        f"hostile corpus: {len(verdicts)} cases, {verdicts.count('ok')} ok; " + ", ".join(
            f"{counts[v]} {v if v != 'hang' else 'hangs'}" if v != "traceback" else
            f"{counts[v]} tracebacks" for v in VERDICTS))
