"""`pflpipe.beside.Beside`: work in a forked process, its outcome back here."""

import multiprocessing
import os
import sys

import pytest

from pflpipe.beside import Beside
from pflpipe.errors import DataError


def _where(path, factor):
    path.write_text(str(factor * 7))
    return os.getpid(), "tabnanny" in sys.modules


def _fail(path):
    raise DataError(f"no room in {path}")


def test_the_work_runs_in_another_process_with_arguments_sent_later(tmp_path):
    assert "tabnanny" not in sys.modules   # the child imports it (preload), not this process

    with Beside(_where, preload=("tabnanny",)) as side:
        side.send(tmp_path / "out", 6)
        pid, preloaded = side.result()

    assert pid != os.getpid() and preloaded and "tabnanny" not in sys.modules
    assert (tmp_path / "out").read_text() == "42"
    assert not multiprocessing.active_children()


def test_arguments_given_at_the_start_are_inherited(tmp_path):
    with Beside(_where, args=(tmp_path / "out", 2)) as side:
        assert side.result()[0] != os.getpid()
    assert (tmp_path / "out").read_text() == "14"


def test_the_childs_failure_is_raised_here_as_it_was(tmp_path):
    with pytest.raises(DataError, match="no room in .*/x"), Beside(_fail) as side:
        side.send(tmp_path / "x")
        side.result()
    assert not multiprocessing.active_children()


def test_a_failure_here_before_sending_ends_the_waiting_child(tmp_path):
    with pytest.raises(KeyError), Beside(_where, preload=("tabnanny",)):
        raise KeyError("training failed")
    assert not multiprocessing.active_children() and not (tmp_path / "out").exists()


def test_a_failure_here_after_sending_waits_for_the_child_then_is_raised(tmp_path):
    with pytest.raises(KeyError), Beside(_where) as side:
        side.send(tmp_path / "out", 1)
        raise KeyError("tracking failed")
    assert (tmp_path / "out").read_text() == "7"   # the child finished first
    assert not multiprocessing.active_children()
