"""Split kfp.local's output by task: one log file per task, and each task's events.

kfp.local prints everything to ``sys.stdout``: its own log lines ("Executing task 'x'", "Task 'x'
finished with status SUCCESS") and, indented, each task's subprocess output. A task runs in one
thread from start to finish (ParallelFor iterations run in a thread pool), so the lines a thread
writes between "Executing task" and "finished" are that task's. `TaskLogRouter` stands in for
``sys.stdout`` during a run and keeps them apart. The patterns below read kfp.local's own lines
only, to split the log; what a stage says (who it is, its rounds, notices, its error's class)
arrives as typed events in its lines (`pflpipe.events`).
"""

import io
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe import events
from pflpipe.layout import EVENTS_JSONL, PIPELINE_LOG, task_log

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = re.compile(r" - INFO - Executing task '([\w-]+)'")
FINISHED = re.compile(r" - (?:INFO|ERROR) - Task '([\w-]+)' finished with status (\w+)")
CACHE_HIT = re.compile(r" - INFO - Task ([\w-]+) cache hit \(key=(\w+)\)")
#: An error kfp.local itself logs outside any task (e.g. while it stores a loop's outputs).
RUNNER_ERROR = re.compile(r" - ERROR - (.+)$")
TRACEBACK = "Traceback (most recent call last):"
#: Lines of a subprocess are indented by kfp.local (logging_utils.indented_print); a task in a
#: loop body may be indented further (`pflpipe.events.parse` allows leading spaces).
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
    point: str | None = None         # a tune_point task's grid point, e.g. "lam=1.0"; a sweep's
    path: Path | None = None         # the task's log file, once written
    progress: tuple[int, int] | None = None  # (round, rounds) of the latest progress event
    notes: list[str] = field(default_factory=list)  # its notices and warnings, in order, once each
    reused: bool = False             # a notice said all it did was reuse earlier work
    failure: dict | None = None      # its error event: type, message, bad_input

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
    def seconds(self) -> float:
        """Wall time so far (or in all)."""
        return (self.finished or time.monotonic()) - self.started

    @property
    def bad_input(self) -> bool:
        """Whether the stage refused the user's input (its error event says so): exit code 2."""
        return bool(self.failure and self.failure.get("bad_input"))

    def error(self) -> str:
        """The stage's error (``type: message``, from its error event, or `died`'s)."""
        failure = self.failure or self.died()
        return f"{failure.get('type', 'Error')}: {failure.get('message', '')}"

    def died(self) -> dict:
        """The error event of a task that failed without one (killed, or failed to start).

        Its log's last traceback gives the error; without one, its process was killed (the
        shell's "Killed": SIGKILL, the out-of-memory killer) or crashed.
        """
        lines = [line for line in self.lines if events.parse(line) is None]
        if any(line.startswith(TRACEBACK) for line in lines):
            kind, _, message = stage_error(lines).partition(": ")
            return {"event": "error", "type": kind, "message": message, "bad_input": False}
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        how = ("was killed (SIGKILL)" if last == "Killed" else
               f"ended without reporting an error (its last output: {last!r})" if last else
               "ended without reporting an error or any output")
        return {"event": "error", "type": "ProcessDied", "bad_input": False,
                "message": f"the task's process {how}: the system's out-of-memory killer, or a "
                           "custom model or data loader that ends its process; if memory ran "
                           "out, lower engine.parallel_tasks, engine.max_members or the batch "
                           "size"}

    def take(self, event: dict) -> bool:
        """Apply one of the stage's events; return whether it is news for the status line."""
        kind = event["event"]
        if kind == "started":
            self.seed, self.label = event.get("seed"), event.get("label")
            self.shard = int(event["shard"]) if event.get("shard") not in (None, "") else None
            self.point = (point_name(event["point"]) if event.get("point")
                          else event.get("sweep_point"))   # a sweep's point: its label
        elif kind == "progress":
            self.progress = (int(event["round"]), int(event["rounds"]))
        elif kind in ("notice", "warning"):
            note = ("warning: " if kind == "warning" else "") + str(event.get("text", ""))
            if note not in self.notes:   # train_members sets up a stage per unit: one each
                self.notes.append(note)
            self.reused = self.reused or bool(event.get("reused"))
        elif kind == "error":
            self.failure = event
        return kind in ("started", "progress")


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
        log_dir: where ``pipeline.log`` (everything), ``events.jsonl`` (every task's events,
            each with the run's id and its task's title; a cached task's "cached" event; a task
            that died without an error event gets one) and one ``<task>.log`` per task go.
        on_event: called with ("started" | "progress" | "finished" | "cached", TaskLog) from
            the runner's threads ("progress" also once the stage's started event names it).
        cache_root: kfp.local's cache directory: a cached task is named from the identity its
            outputs' metadata keeps (`pflpipe.events.stage`'s `named`), found by the key
            kfp.local logs.

    """

    def __init__(self, log_dir: Path, on_event: Callable[[str, TaskLog], None],
                 run_id: str = "", cache_root: Path | None = None):
        super().__init__()
        self.run_id = run_id
        self.log_dir = Path(log_dir)
        self.cache_root = Path(cache_root) if cache_root else None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.tasks: list[TaskLog] = []
        self.runner_errors: list[str] = []
        self._on_event = on_event
        self._lock = threading.Lock()
        self._local = threading.local()
        self._all = (self.log_dir / PIPELINE_LOG).open("a", encoding="utf-8")
        self._events = (self.log_dir / EVENTS_JSONL).open("a", encoding="utf-8")

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
        """Close the combined log and the events file."""
        self._all.close()
        self._events.close()
        super().close()

    def _line(self, line: str) -> None:
        with self._lock:
            self._all.write(line + "\n")
        if match := CACHE_HIT.search(line):
            self._cached(match.group(1), match.group(2))
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

    def _cached(self, task_name: str, key: str) -> None:
        """Record a task kfp.local did not run because its outputs are cached."""
        task = TaskLog(_stage(task_name), status="CACHED")
        identity = cached_identity(self.cache_root, key) if self.cache_root else None
        if identity:
            task.take({"event": "started", **identity})
        task.finished = task.started
        with self._lock:
            self.tasks.append(task)
        self._record(task, {"event": "cached"})
        self._on_event("cached", task)

    def _collect(self, task: TaskLog, line: str) -> None:
        task.lines.append(line)
        if (event := events.parse(line)) is None:
            return
        if task.take(event):
            self._on_event("progress", task)
        self._record(task, event)

    def _record(self, task: TaskLog, event: dict) -> None:
        """Append `event` of `task` to events.jsonl, with the run it belongs to."""
        with self._lock:
            self._events.write(json.dumps({"run": self.run_id, "task": task.title, **event},
                                          ensure_ascii=False) + "\n")
            self._events.flush()

    def _finish(self, task: TaskLog, status: str) -> None:
        if status != "SUCCESS" and task.failure is None:   # killed: no error event of its own
            task.failure = task.died()
            self._record(task, task.failure)
        task.status, task.finished = status, time.monotonic()
        task.path = self.log_dir / task_log(task.title)
        task.path.write_text("\n".join(task.lines) + "\n", encoding="utf-8")
        self._on_event("finished", task)


def cached_identity(cache_root: Path, key: str) -> dict | None:
    """Who a cached task was: the identity one of its cached outputs keeps in its metadata.

    kfp.local keeps each cached task's outputs, metadata included, in ``<cache_root>/<key>.json``
    and logs the key's first characters on a cache hit; a metadata number comes back as a float.
    None when no output names its task (a cache entry from before outputs were named, or a
    stage that names none).
    """
    for path in sorted(Path(cache_root).glob(f"{key}*.json")):
        try:
            outputs = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        for output in outputs.values() if isinstance(outputs, dict) else ():
            found = output.get("metadata", {}).get(events.TASK) if isinstance(output, dict) \
                else None
            if isinstance(found, dict):   # kfp keeps metadata as a protobuf Struct: 0 → 0.0
                return {k: int(v) if isinstance(v, float) and v.is_integer() else v
                        for k, v in found.items()}
    return None


def _stage(task_name: str) -> str:
    """Return the stage name of a task: kfp names tasks after components, with dashes.

    A component used by several tasks names the second `<component>-2` and so on (the tuning
    seeds' partition_data, the tuned entries' personalize); the stage is the component.
    """
    return re.sub(r"-\d+$", "", task_name).replace("-", "_")


def point_name(values: str) -> str:
    """A grid point's name from its `values` parameter (a JSON object).

    >>> point_name('{"lam": 1.0, "lr": 0.05}')
    'lam=1.0, lr=0.05'
    """
    return ", ".join(f"{name}={json.dumps(value)}" for name, value in json.loads(values).items())
