"""`pflpipe.events`: what a stage tells its runner, as typed JSON lines in its log."""

import doctest
import math
import os
import pty
import select
import sys
from contextlib import contextmanager

import pytest

from pflpipe import events
from pflpipe.errors import DataError, DivergenceError, SpecError


def emitted(capsys) -> list[dict]:
    """The events printed since the last call, parsed back (every line must be one)."""
    lines = capsys.readouterr().out.splitlines()
    parsed = [events.parse(line) for line in lines]
    assert None not in parsed, lines
    return parsed


def test_a_stage_that_finishes_says_who_it_is_then_its_result(capsys):
    with events.stage("personalize", seed=0, label="ditto", shard=""):
        events.notice("1 torch thread")

    assert emitted(capsys) == [
        {"event": "started", "stage": "personalize", "seed": 0, "label": "ditto"},
        {"event": "notice", "text": "1 torch thread"},
        {"event": "result", "stage": "personalize"}]


@pytest.mark.parametrize(("error", "bad_input"), [
    (SpecError(["federation.lr: must be > 0", "partition.alpha: required"]), True),
    (DataError("no results.csv in /r"), True),
    (DivergenceError("client 7, round 12: loss became NaN", 7, 12), False),
    (KeyError("fedvem"), False)])
def test_a_stage_that_fails_names_its_errors_class_and_whether_the_input_was_bad(
        capsys, error, bad_input):
    with pytest.raises(type(error)) as raised, events.stage("warm_start_fedavg", seed=1):
        raise error

    assert raised.value is error  # re-raised as it is: the process still fails
    started, failed = emitted(capsys)
    assert started == {"event": "started", "stage": "warm_start_fedavg", "seed": 1}
    assert failed == {"event": "error", "type": type(error).__name__, "message": str(error),
                      "bad_input": bad_input}


def test_progress_carries_the_mean_validation_accuracy_and_never_a_nan(capsys):
    on_round = events.round_progress(5)
    on_round(1, [{"split": "val", "accuracy": 0.25}, {"split": "val", "accuracy": 0.5},
                 {"split": "test", "accuracy": 1.0}, {"split": "val", "accuracy": ""}])
    on_round(2, [{"split": "val", "accuracy": math.nan}, {"split": "test", "accuracy": 1.0}])
    events.progress(3, 5, math.nan)

    assert emitted(capsys) == [
        {"event": "progress", "round": 1, "rounds": 5, "mean_val_accuracy": 0.375},
        {"event": "progress", "round": 2, "rounds": 5},
        {"event": "progress", "round": 3, "rounds": 5}]


def test_notice_warning_and_reuse_are_typed(capsys):
    events.notice("resumed from round 3/20")
    events.notice("reused finished checkpoints (round 20/20): nothing trained", reused=True)
    events.warning("compute differs by 2.0x")

    assert emitted(capsys) == [
        {"event": "notice", "text": "resumed from round 3/20"},
        {"event": "notice", "text": "reused finished checkpoints (round 20/20): nothing trained",
         "reused": True},
        {"event": "warning", "text": "compute differs by 2.0x"}]


def test_an_unknown_kind_is_refused_and_an_unknown_line_is_no_event():
    with pytest.raises(ValueError, match="unknown event 'progres'"):
        events.emit("progres", round=1)
    assert events.parse(events.TAG + '{"event": "gossip"}') is None
    assert events.parse(events.TAG + "[1, 2]") is None
    assert events.parse("pflpipe note: 1 torch thread") is None


def test_events_doctests_pass():
    result = doctest.testmod(events)
    assert result.attempted > 0 and result.failed == 0


@contextmanager
def terminal():
    """Point stdout at a real pseudo-terminal in the block; yields a reader of what it shows.

    (Set in the test body: pytest's capture sets sys.stdout again between setup and the call.)
    """
    leader, follower = pty.openpty()
    tty = open(follower, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    saved, sys.stdout = sys.stdout, tty

    def shown() -> list[str]:
        tty.flush()
        data = b""
        while select.select([leader], [], [], 0.5)[0]:  # all it shows, however it is split
            data += os.read(leader, 65536)
        return data.decode().replace("\r\n", "\n").splitlines()

    try:
        yield shown
    finally:
        sys.stdout = saved
        tty.close()
        os.close(leader)


def test_on_a_terminal_outside_a_component_events_are_text():
    with terminal() as shown:
        events.progress(3, 20, 0.8125)
        events.progress(4, 20)
        events.notice("reused the partition of `pflpipe split` in /r", reused=True)
        events.warning("no validation split")
        lines = shown()

    assert lines == ["round 3/20: mean validation accuracy 0.8125", "round 4/20",
                          "note: reused the partition of `pflpipe split` in /r",
                          "warning: no validation split"]


def test_a_components_events_are_its_runners_even_on_a_terminal():
    with terminal() as shown:
        with pytest.raises(DataError), events.stage("partition_data", seed=0):
            events.warning("no validation split")
            raise DataError("bad")
        lines = shown()

    assert [events.parse(line) for line in lines] == [
        {"event": "started", "stage": "partition_data", "seed": 0},
        {"event": "warning", "text": "no validation split"},
        {"event": "error", "type": "DataError", "message": "bad", "bad_input": True}]


def test_who_reads_is_the_innermost_block_and_is_restored_after_it(capsys):
    with events.addressed_to("person"):
        events.notice("a")
        with events.stage("tune"):
            events.notice("b")
        events.notice("c")
    events.notice("d")  # captured, not a terminal: tagged

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "note: a" and lines[4] == "note: c"
    assert [events.parse(line)["event"] for line in lines[1:4]] == ["started", "notice", "result"]
    assert events.parse(lines[5]) == {"event": "notice", "text": "d"}
    with pytest.raises(ValueError, match="unknown reader 'someone'"), \
            events.addressed_to("someone"):
        pass
