"""Sort kfp.local's output by task: progress events, one log file per task, a failed stage's error.

kfp.local prints everything to ``sys.stdout``: its own log lines ("Executing task 'x'", "Task 'x'
finished with status SUCCESS") and, indented, each task's subprocess output. A task runs in one
thread from start to finish (ParallelFor iterations run in a thread pool), so the lines a thread
writes between "Executing task" and "finished" are that task's. `TaskLogRouter` stands in for
``sys.stdout`` during a run and keeps them apart.
"""

import io
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe.layout import PIPELINE_LOG
from pflpipe.stages import notice

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = re.compile(r" - INFO - Executing task '([\w-]+)'")
FINISHED = re.compile(r" - (?:INFO|ERROR) - Task '([\w-]+)' finished with status (\w+)")
CACHE_HIT = re.compile(r" - INFO - Task ([\w-]+) cache hit")
#: An error kfp.local itself logs outside any task (e.g. while it stores a loop's outputs).
RUNNER_ERROR = re.compile(r" - ERROR - (.+)$")
SEED = re.compile(r'^\s*"seed": (\d+),?$')
LABEL = re.compile(r'^\s*"label": "([^"]+)",?$')
SHARD = re.compile(r'^\s*"shard": "?(\d+)"?,?$')  # an int, or a personalize item's string
#: A tune_point task's grid point: its `values` parameter, a JSON object as a JSON string.
VALUES = re.compile(r'^\s*"values": ("(?:[^"\\]|\\.)*"),?$')
#: `pflpipe.stages.common.PROGRESS`, printed by a training stage after each round.
PROGRESS = re.compile(r"^\s*pflpipe progress: round (\d+)/(\d+)")
#: `pflpipe.stages.notice.NOTE`: what a stage did beyond running (threads, resume, reuse).
NOTE = re.compile(rf"^\s*{re.escape(notice.NOTE)}(.+)$")
TRACEBACK = "Traceback (most recent call last):"
#: Lines of a subprocess are indented by kfp.local (logging_utils.indented_print); a task in a
#: loop body may be indented further, so the patterns above allow leading spaces.
INDENT = "    "


@dataclass
class TaskLog:
    """One task's output and outcome."""

    stage: str                       # the stage name: partition_data, personalize, ...
    lines: list[str] = field(default_factory=list)
    status: str = "RUNNING"          # RUNNING, SUCCESS, FAILURE or CACHED
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    seed: int | None = None
    label: str | None = None
    shard: int | None = None         # the client shard a sharded stage's task trains
    point: str | None = None         # a tune_point task's grid point, e.g. "lam=1.0"
    path: Path | None = None         # the task's log file, once written
    progress: tuple[int, int] | None = None  # (round, rounds) of the latest progress line
    notes: list[str] = field(default_factory=list)  # the stage's notes, in order

    @property
    def title(self) -> str:
        """E.g. ``personalize[fedper] · seed 0``, ``personalize[fedavg_ft, shard 1] · seed 0``.

        A tune_point task's names its grid point (``tune_point[ditto, lam=1.0] · seed 7``), so
        the points of one entry and seed log to files of their own.
        """
        what = [self.label] if self.label else []
        if self.point:
            what.append(self.point)
        if self.shard is not None:
            what.append(f"shard {self.shard}")
        name = f"{self.stage}[{', '.join(what)}]" if what else self.stage
        return name if self.seed is None else f"{name} · seed {self.seed}"

    @property
    def reused(self) -> bool:
        """Whether the stage only reused earlier work (a partition, finished checkpoints)."""
        return any(note.startswith("reused") for note in self.notes)

    @property
    def seconds(self) -> float:
        """Wall time so far (or in all)."""
        return (self.finished or time.monotonic()) - self.started

    def error(self) -> str:
        """The exception the task's process ended with, as Python printed it (type: message)."""
        return stage_error(self.lines)


def stage_error(lines: list[str]) -> str:
    r"""Return the last traceback's exception lines without the traceback; else the last lines.

    >>> stage_error(["x", "Traceback (most recent call last):", '  File "a.py", line 1',
    ...              "    f()", "pflpipe.errors.DataError: no results.csv", "  in results/"])
    'DataError: no results.csv\n  in results/'
    """
    starts = [i for i, line in enumerate(lines) if line.startswith(TRACEBACK)]
    if not starts:
        return "\n".join(line for line in lines[-5:] if line.strip())
    tail = lines[starts[-1] + 1:]
    first = next((i for i, line in enumerate(tail) if line and not line[0].isspace()), None)
    if first is None:
        return "\n".join(tail).strip()
    message = "\n".join(tail[first:]).rstrip()
    return re.sub(r"^(?:[A-Za-z_][\w]*\.)+(?=\w+:)", "", message)


class TaskLogRouter(io.TextIOBase):
    """A ``sys.stdout`` stand-in that sorts kfp.local's lines into `TaskLog` objects.

    Args:
        log_dir: where ``pipeline.log`` (everything) and one ``<task>.log`` per task go.
        on_event: called with ("started" | "progress" | "finished" | "cached", TaskLog) from
            the runner's threads.

    """

    def __init__(self, log_dir: Path, on_event: Callable[[str, TaskLog], None]):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.tasks: list[TaskLog] = []
        self.runner_errors: list[str] = []
        self._on_event = on_event
        self._lock = threading.Lock()
        self._local = threading.local()
        self._all = (self.log_dir / PIPELINE_LOG).open("a", encoding="utf-8")

    def writable(self) -> bool:
        """Return True: this is an output stream."""
        return True

    def write(self, text: str) -> int:
        """Buffer `text` per thread; handle every complete line."""
        pending = getattr(self._local, "pending", "") + text
        *complete, self._local.pending = pending.split("\n")
        for line in complete:
            self._line(ANSI.sub("", line))
        return len(text)

    def failures(self) -> list[TaskLog]:
        """The tasks that failed, in the order they finished."""
        return [task for task in self.tasks if task.status == "FAILURE"]

    def close(self) -> None:
        """Close the combined log."""
        self._all.close()
        super().close()

    def _line(self, line: str) -> None:
        with self._lock:
            self._all.write(line + "\n")
        if match := CACHE_HIT.search(line):
            self._cached(match.group(1))
        elif match := STARTED.search(line):
            task = TaskLog(_stage(match.group(1)))
            self._local.task = task
            with self._lock:
                self.tasks.append(task)
            self._on_event("started", task)
        elif (match := FINISHED.search(line)) and getattr(self._local, "task", None):
            self._finish(self._local.task, match.group(2))
            self._local.task = None
        elif getattr(self._local, "task", None) is not None:
            self._collect(self._local.task, line.removeprefix(INDENT))
        elif match := RUNNER_ERROR.search(line):
            with self._lock:
                self.runner_errors.append(match.group(1))

    def _cached(self, task_name: str) -> None:
        """Record a task kfp.local did not run because its outputs are cached."""
        task = TaskLog(_stage(task_name), status="CACHED")
        task.finished = task.started
        with self._lock:
            self.tasks.append(task)
        self._on_event("cached", task)

    def _collect(self, task: TaskLog, line: str) -> None:
        task.lines.append(line)
        if task.seed is None and (match := SEED.match(line)):
            task.seed = int(match.group(1))
        if task.label is None and (match := LABEL.match(line)):
            task.label = match.group(1)
        if task.shard is None and (match := SHARD.match(line)):
            task.shard = int(match.group(1))
        if task.point is None and (match := VALUES.match(line)):
            task.point = point_name(match.group(1))
        if match := PROGRESS.match(line):
            task.progress = (int(match.group(1)), int(match.group(2)))
            self._on_event("progress", task)
        elif match := NOTE.match(line):
            task.notes.append(match.group(1))

    def _finish(self, task: TaskLog, status: str) -> None:
        task.status, task.finished = status, time.monotonic()
        task.path = self.log_dir / f"{re.sub(r'[^A-Za-z0-9-]+', '_', task.title).strip('_')}.log"
        task.path.write_text("\n".join(task.lines) + "\n", encoding="utf-8")
        self._on_event("finished", task)


def point_name(printed: str) -> str:
    r"""A grid point's name from its printed `values` parameter (a JSON string of a JSON object).

    >>> point_name('"{\\"lam\\": 1.0, \\"lr\\": 0.05}"')
    'lam=1.0, lr=0.05'
    """
    values = json.loads(json.loads(printed))
    return ", ".join(f"{name}={json.dumps(value)}" for name, value in values.items())


def _stage(task_name: str) -> str:
    """Return the stage name of a task: kfp names tasks after components, with dashes.

    A component used by several tasks names the second `<component>-2` and so on (the tuning
    seeds' partition_data, the tuned entries' personalize); the stage is the component.
    """
    return re.sub(r"-\d+$", "", task_name).replace("-", "_")
