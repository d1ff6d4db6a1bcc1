"""`pflpipe.events`: what a stage tells its runner, as typed JSON lines in its log."""

import doctest
import math

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
