"""The router that sorts kfp.local's stdout by task (lines shaped like kfp.local 2.17's) and
reads each task's events (`pflpipe.events`)."""

import json
import threading

import pytest

from pflpipe import events
from pflpipe.errors import DataError, DivergenceError
from pflpipe.pipelines.local_runner import StageFailed
from pflpipe.pipelines.tasklog import TaskLogRouter, stage_error

CYAN, GREEN, RED, RESET = "\x1b[96m", "\x1b[92m", "\x1b[91m", "\x1b[0m"


def started(name: str) -> str:
    return f"21:00:00.000 - INFO - Executing task {CYAN}'{name}'{RESET}\n"


def finished(name: str, ok: bool = True) -> str:
    level, status = ("INFO", f"{GREEN}SUCCESS") if ok else ("ERROR", f"{RED}FAILURE")
    return (f"21:00:01.000 - {level} - Task {CYAN}'{name}'{RESET} finished with status "
            f"{status}{RESET}\n")


def task_output(*lines: str) -> str:
    return "".join(f"    {line}\n" for line in lines)


EXECUTOR_INPUT = ('[KFP Executor INFO]: Got executor_input:', '{', '    "inputs": {',
                  '        "parameterValues": {', '            "label": "fedper",',
                  '            "seed": 3,', '            "spec_json": "{\\"seeds\\": [0]}"',
                  '        }', '    }', '}')

def event_lines(capsys, *calls) -> list[str]:
    """What the stage-side calls print: the lines a task's log holds."""
    capsys.readouterr()
    for call in calls:
        call()
    return capsys.readouterr().out.splitlines()


def started_event(stage: str, **identity) -> str:
    return events.TAG + json.dumps({"event": "started", "stage": stage, **identity})


def test_router_sorts_lines_by_task_and_takes_who_it_is_from_its_started_event(tmp_path):
    seen = []
    router = TaskLogRouter(tmp_path, lambda kind, task: seen.append((kind, task.title)), "r1")

    router.write(started("partition-data") + task_output("[KFP Executor INFO]: hello"))
    router.write(finished("partition-data"))
    router.write(started("personalize") + task_output(
        *EXECUTOR_INPUT, started_event("personalize", seed=3, label="fedper", shard="1")))
    router.write(finished("personalize"))
    router.close()

    title = "personalize[fedper, shard 1] · seed 3"
    assert seen == [("started", "partition_data"), ("finished", "partition_data"),
                    ("started", "personalize"), ("progress", title), ("finished", title)]
    assert router.tasks[1].shard == 1
    assert [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()] \
        == [{"run": "r1", "task": title, "event": "started", "stage": "personalize", "seed": 3,
             "label": "fedper", "shard": "1"}]
    assert (tmp_path / "personalize_fedper_shard_1_seed_3.log").is_file()
    assert "hello" in (tmp_path / "partition_data.log").read_text()
    assert "Executing task" in (tmp_path / "pipeline.log").read_text()


def test_router_reads_nothing_out_of_kfps_printed_parameters(tmp_path):
    """Without a started event a task is its stage: kfp's executor input is not parsed."""
    router = TaskLogRouter(tmp_path, lambda kind, task: None)

    router.write(started("personalize") + task_output(*EXECUTOR_INPUT))
    router.write(finished("personalize"))

    assert [(t.title, t.seed, t.label) for t in router.tasks] == [("personalize", None, None)]


def test_a_failed_stage_is_its_error_event_not_its_traceback(tmp_path, capsys):
    """The component's error event gives the class, the message and whether it is bad input."""
    def fail(error):
        with pytest.raises(type(error)), events.stage("personalize", seed=3, label="fedper"):
            raise error

    diverged = DivergenceError("client 7, round 12: loss became NaN\n"
                               "       Lower federation.lr; checkpoints for rounds 0-11 are "
                               "intact.", client=7, round_idx=12)
    lines = {name: event_lines(capsys, lambda e=error: fail(e))
             for name, error in (("diverged", diverged), ("bad", DataError("no results.csv")))}
    router = TaskLogRouter(tmp_path, lambda kind, task: None)
    for name in ("diverged", "bad"):
        # the traceback's last line names another error: the event, not the text, counts
        router.write(started("personalize") + task_output(
            *lines[name], "Traceback (most recent call last):", "KeyError: 'x'"))
        router.write(finished("personalize", ok=False))

    diverged_task, bad_task = router.failures()
    assert diverged_task.title == "personalize[fedper] · seed 3"
    assert diverged_task.error() == ("DivergenceError: client 7, round 12: loss became NaN\n"
                                     "       Lower federation.lr; checkpoints for rounds 0-11 "
                                     "are intact.")
    assert not diverged_task.bad_input and not StageFailed(diverged_task).bad_input
    assert bad_task.error() == "DataError: no results.csv"
    assert bad_task.bad_input and StageFailed(bad_task).bad_input
    assert diverged_task.path == tmp_path / "personalize_fedper_seed_3.log"


def test_a_stage_that_died_without_an_error_event_is_its_log_and_never_bad_input(tmp_path):
    """Killed, or failed before its component started: the log's last traceback; exit 1."""
    router = TaskLogRouter(tmp_path, lambda kind, task: None)
    router.write(started("personalize") + task_output(
        "Traceback (most recent call last):", '  File "x.py", line 1',
        "pflpipe.errors.DataError: read from a traceback"))
    router.write(finished("personalize", ok=False))

    [task] = router.failures()
    assert task.error() == "DataError: read from a traceback"
    assert not task.bad_input


def test_a_killed_stage_is_one_error_without_protocol_lines_and_an_error_event(tmp_path, capsys):
    """SIGKILL (the OOM killer, a model ending its process): no error event, the shell's Killed."""
    lines = event_lines(capsys, lambda: events.emit("started", stage="personalize", seed=0,
                                                    label="x"),
                        lambda: events.notice("1 torch thread"))
    router = TaskLogRouter(tmp_path, lambda kind, task: None, "r1")
    router.write(started("personalize") + task_output(*lines, "}", "Killed"))
    router.write(finished("personalize", ok=False))
    router.close()

    [task] = router.failures()
    assert task.error().startswith("ProcessDied: the task's process was killed (SIGKILL): the "
                                   "system's out-of-memory killer, or a custom model")
    assert events.TAG.strip() not in task.error() and not task.bad_input
    recorded = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert recorded[-1] == {"run": "r1", "task": "personalize[x] · seed 0", **task.failure}
    assert recorded[-1]["type"] == "ProcessDied"


def test_a_notice_a_task_repeats_shows_once(tmp_path, capsys):
    """train_members sets up one stage per unit it trains: "1 torch thread" each time."""
    lines = event_lines(capsys, *[lambda: events.notice("1 torch thread")] * 8,
                        lambda: events.notice("resumed from round 2/3"))
    router = TaskLogRouter(tmp_path, lambda kind, task: None)

    router.write(started("train-members") + task_output(*lines) + finished("train-members"))

    assert router.tasks[0].notes == ["1 torch thread", "resumed from round 2/3"]


def test_events_of_reruns_carry_their_run_and_cached_tasks_an_event(tmp_path):
    for run in ("first", "second"):   # two runs append to one events.jsonl
        router = TaskLogRouter(tmp_path, lambda kind, task: None, run)
        router.write("21:00:00,000 - INFO - Task warm-start-fedavg cache hit (key=0123456789ab)"
                     "; skipping execution.\n")
        router.close()

    recorded = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert recorded == [{"run": run, "task": "warm_start_fedavg", "event": "cached"}
                        for run in ("first", "second")]


def test_router_reports_each_round_a_stage_reports(tmp_path, capsys):
    """A training stage's progress event per round reaches the runner with its round."""
    lines = event_lines(capsys, lambda: events.round_progress(30)(
        12, [{"split": "val", "accuracy": 0.5}, {"split": "val", "accuracy": 1.0},
             {"split": "test", "accuracy": 0.0}]))
    assert [events.parse(line) for line in lines] == [
        {"event": "progress", "round": 12, "rounds": 30, "mean_val_accuracy": 0.75}]
    seen = []
    router = TaskLogRouter(tmp_path, lambda kind, task: seen.append((kind, task.progress)))

    router.write(started("warm-start-fedavg") + task_output(*EXECUTOR_INPUT, *lines))
    router.write(finished("warm-start-fedavg"))

    assert seen == [("started", None), ("progress", (12, 30)), ("finished", (12, 30))]


def test_router_keeps_a_stages_notices_also_when_its_output_is_indented_deeper(tmp_path, capsys):
    """Notices say what a stage did; a task in a loop body may come indented by 8 spaces."""
    printed = event_lines(capsys, lambda: events.notice("1 torch thread"),
                          lambda: events.notice("reused finished checkpoints (round 20/20): "
                                                "nothing trained", reused=True),
                          lambda: events.warning("no validation split"))
    finished_tasks = []
    router = TaskLogRouter(tmp_path, lambda kind, task: kind == "finished"
                           and finished_tasks.append(task))

    router.write(started("train-local") + task_output(*EXECUTOR_INPUT[:1],
                                                      *(f"    {line}" for line in printed)))
    router.write(finished("train-local"))
    router.write(started("warm-start-fedavg") + task_output(printed[0]))
    router.write(finished("warm-start-fedavg"))

    local, warm = finished_tasks
    assert local.notes == ["1 torch thread",
                           "reused finished checkpoints (round 20/20): nothing trained",
                           "warning: no validation split"]
    assert local.reused and not warm.reused and warm.notes == ["1 torch thread"]


def test_router_keeps_concurrent_tasks_apart(tmp_path):
    router = TaskLogRouter(tmp_path, lambda kind, task: None)
    barrier = threading.Barrier(2)

    def task(label: str) -> None:
        router.write(started("personalize"))
        barrier.wait()
        for i in range(200):  # interleave with the other thread, split writes like print does
            router.write("    ")
            router.write((started_event("personalize", label=label) if i == 0
                          else f"{label} line {i}") + "\n")
        barrier.wait()
        router.write(finished("personalize"))

    threads = [threading.Thread(target=task, args=(label,)) for label in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(t.label for t in router.tasks) == ["a", "b"]
    for t in router.tasks:
        assert all(line.startswith(f"{t.label} line") for line in t.lines[1:])
        assert len(t.lines) == 200


def test_router_reports_cache_hits(tmp_path):
    events = []
    router = TaskLogRouter(tmp_path, lambda kind, task: events.append((kind, task.stage)))

    router.write("21:00:00,000 - INFO - Task warm-start-fedavg cache hit (key=0123456789ab); "
                 "skipping execution.\n")

    assert events == [("cached", "warm_start_fedavg")]
    assert router.tasks[0].status == "CACHED"


def test_router_names_a_components_second_task_after_its_stage(tmp_path):
    events = []
    router = TaskLogRouter(tmp_path, lambda kind, task: events.append((kind, task.stage)))

    router.write("21:00:00,000 - INFO - Task personalize-2 cache hit (key=0123456789ab); "
                 "skipping execution.\n")

    assert events == [("cached", "personalize")]


def test_stage_error_without_traceback_gives_the_last_lines():
    assert stage_error(["a", "", "Killed"]) == "a\nKilled"


def test_stage_error_takes_the_last_of_chained_tracebacks():
    lines = ["Traceback (most recent call last):", '  File "a", line 1', "KeyError: 'x'", "",
             "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):", '  File "b", line 2',
             "pflpipe.errors.DataError: no results.csv in /r"]
    assert stage_error(lines) == "DataError: no results.csv in /r"


def test_tasklog_doctests_pass():
    import doctest

    from pflpipe.pipelines import tasklog

    assert doctest.testmod(tasklog).failed == 0


def test_a_runner_error_after_successful_stages_is_named_with_its_log(tmp_path):
    """kfp.local 2.17 failed a loop after its tasks succeeded (a NaN KFP metric); the cause must
    reach the screen, not only pipeline.log."""
    from pflpipe.pipelines.local_runner import RunnerFailed

    router = TaskLogRouter(tmp_path, lambda kind, task: None)
    router.write(started("collect-results") + task_output("done") + finished("collect-results"))
    cause = ("Task for-loop-2-iteration-0 failed with exception: Failed to serialize metadata "
             "field: Fail to serialize NaN for Value.number_value")
    router.write(f"2026-01-01 13:43:58,248 - ERROR - {cause}\n")
    router.write("2026-01-01 13:43:58,248 - INFO - Skipping task evaluate-fairness\n")
    router.close()

    error = RunnerFailed(router.runner_errors, tmp_path / "pipeline.log")

    assert router.failures() == []
    assert str(error) == (f"the local runner failed the pipeline after its stages:\n  {cause}\n"
                          f"  (its log: {tmp_path / 'pipeline.log'})")


def test_a_run_puts_back_the_print_that_kfp_local_swaps_per_task(tmp_path):
    # kfp.local indents a task's output by swapping builtins.print per task; two tasks of a
    # ParallelFor that end in the order they started leave the first one's indenting print in
    # place for good (later prints of the process came out indented, doctests failed)
    import builtins

    from kfp.local.logging_utils import indented_print

    from pflpipe.pipelines.local_runner import _routed

    before = builtins.print
    with _routed(TaskLogRouter(tmp_path, lambda kind, task: None)):
        first, second = indented_print(4), indented_print(4)
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)
        assert builtins.print is not before   # what kfp.local leaves behind

    assert builtins.print is before


def test_tune_point_tasks_of_one_entry_and_seed_log_to_a_file_per_grid_point(tmp_path):
    """Two grid points of ditto on tuning seed 7: two titles, two log files, none overwritten."""
    router = TaskLogRouter(tmp_path, lambda kind, task: None)

    for values in ('{"lam": 1.0}', '{"lam": 0.1}'):
        router.write(started("tune-point") + task_output(
            started_event("tune_point", seed=7, label="ditto", point=values), f"trained {values}"))
        router.write(finished("tune-point"))
    router.close()

    assert [t.title for t in router.tasks] == ["tune_point[ditto, lam=1.0] · seed 7",
                                               "tune_point[ditto, lam=0.1] · seed 7"]
    first, second = (t.path.read_text() for t in router.tasks)
    assert first != second and 'trained {"lam": 1.0}' in first


def test_router_names_a_cached_task_from_its_outputs_metadata(tmp_path):
    # kfp.local's own cache writes the entry: the identity `events.stage(named=...)` stamped
    from kfp import dsl
    from kfp.local.cache import LocalCache

    key = "0123456789ab" + "c" * 52
    summary = dsl.Markdown(uri=str(tmp_path / "summary"), metadata={
        events.TASK: {"stage": "personalize", "seed": 2, "label": "fedper"}})
    LocalCache(str(tmp_path / "cache")).put(key, {"summary": summary})
    seen = []
    router = TaskLogRouter(tmp_path, lambda kind, task: seen.append((kind, task.title)),
                           cache_root=tmp_path / "cache")

    router.write("21:00:00,000 - INFO - Task personalize cache hit (key=0123456789ab); "
                 "skipping execution.\n")
    router.write("21:00:00,000 - INFO - Task warm-start-fedavg cache hit (key=ffffffffffff); "
                 "skipping execution.\n")

    assert seen == [("cached", "personalize[fedper] · seed 2"), ("cached", "warm_start_fedavg")]


def test_a_stage_names_its_output_for_the_cache(tmp_path):
    from types import SimpleNamespace

    summary = SimpleNamespace(metadata={})
    with events.stage("personalize", named=summary, seed=1, label="ditto", shard=""):
        pass

    assert summary.metadata == {events.TASK: {"stage": "personalize", "seed": 1,
                                              "label": "ditto"}}
