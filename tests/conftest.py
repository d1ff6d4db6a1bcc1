"""Shared fixtures. Tests run quiet (no progress bars) and never reach the network."""

import os

import pytest

os.environ.setdefault("CI", "true")
os.environ.setdefault("MLFLOW_SKIP_PIP_REQUIREMENTS_CHECK", "true")


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
