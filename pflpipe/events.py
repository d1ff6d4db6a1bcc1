"""What a stage tells its runner: typed events, one JSON object per line of the task's log.

A stage reports what it did as events (docs/contracts.md, "Stage → runner"); the runner never
reads prose out of a stage's output. Each event is one line of the task's log::

    pflpipe-event {"event": "progress", "round": 3, "rounds": 20, "mean_val_accuracy": 0.81}

========  ===============================================================================
event     fields
========  ===============================================================================
started   ``stage``, and what tells its task apart: ``seed``, ``label``, ``shard`` (if any)
progress  ``round``, ``rounds`` and, with a validation split, ``mean_val_accuracy``
notice    ``text``: what the stage did beyond running (threads, a resumed round);
          ``reused``: true when that is all it did (finished checkpoints, a split's partition)
warning   ``text``: a result to read with care (a compute mismatch, a partition's caveat)
result    the stage finished and wrote its outputs: ``stage``
error     the stage failed: ``type`` (the exception's class), ``message``, ``bad_input``
          (true for `pflpipe.errors.BAD_INPUT`: the user's spec or data, exit code 2)
========  ===============================================================================

The channel is the task's log because it is the one thing of a task that every runner reads
while the task runs: kfp.local's SubprocessRunner hands each task's output to
`pflpipe.pipelines.tasklog` line by line, and on a cluster the pod's log is what the KFP UI,
``kubectl logs`` and the log archive keep (the runner cannot read the pod's files). A file would
need a per-task name both sides know, and kfp.local gives a task none that is not one of its
folders or an input that would enter the task's cache key. `parse` reads a line back; `stage`
wraps a component's body (started, result, error).

Outside a runner events are printed as lines for a person (`text`): ``round 3/20: mean
validation accuracy 0.8125``, ``note: ...``, ``warning: ...``. `for_runner` decides, by who runs
the code (`addressed_to`): inside a component's body (`stage`) always the tagged lines; in a verb
of the ``pflpipe`` command line (``pflpipe split``, ``pflpipe personalize-new``, which no runner
runs as a task) always the text; elsewhere (a stage function called from Python) the tagged
lines unless stdout is a terminal. Neither rule needs the runner's help: a runner reads a task's
output through a pipe or a file (kfp.local's subprocess pipe, a pod's log), and the task's
component says so itself. An environment variable set by the runner would have to travel every
path that starts a task (the local runner, the compiled pipeline, the image, a Trainer job's
pods), and a path that missed it would lose its events: its progress, and its errors' class and
exit code.
"""

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pflpipe.errors import BAD_INPUT

#: What starts an event's line (after any indentation a runner adds).
TAG = "pflpipe-event "
KINDS = ("started", "progress", "notice", "warning", "result", "error")
#: Who reads the events of the code running now, innermost last (`addressed_to`).
_readers: list[str] = []


@contextmanager
def addressed_to(reader: str) -> Iterator[None]:
    """Write the events of the code in this block for `reader`: "runner" or "person"."""
    if reader not in ("runner", "person"):
        raise ValueError(f"unknown reader {reader!r}; 'runner' or 'person'")
    _readers.append(reader)
    try:
        yield
    finally:
        _readers.pop()


def for_runner() -> bool:
    """Whether events go out as tagged JSON lines (see the module docstring)."""
    if _readers:
        return _readers[-1] == "runner"
    isatty = getattr(sys.stdout, "isatty", None)
    return not (isatty is not None and isatty())


def emit(kind: str, **fields) -> None:
    """Write one event to the task's log (stdout), flushed at once; as `text` on a terminal."""
    if kind not in KINDS:
        raise ValueError(f"unknown event {kind!r}; one of {', '.join(KINDS)}")
    line = TAG + json.dumps({"event": kind, **fields}, allow_nan=False, default=str)
    print(line if for_runner() else text({"event": kind, **fields}), file=sys.stdout,
          flush=True)


def text(event: dict) -> str:
    """An event as a line for a person.

    >>> text({"event": "progress", "round": 3, "rounds": 20, "mean_val_accuracy": 0.8125})
    'round 3/20: mean validation accuracy 0.8125'
    >>> text({"event": "notice", "text": "reused the split", "reused": True})
    'note: reused the split'
    >>> text({"event": "warning", "text": "no validation split"})
    'warning: no validation split'
    >>> text({"event": "error", "type": "DataError", "message": "no rows", "bad_input": True})
    'error: DataError: no rows'
    """
    kind = event["event"]
    if kind == "progress":
        accuracy = event.get("mean_val_accuracy")
        return f"round {event['round']}/{event['rounds']}" + (
            "" if accuracy is None else f": mean validation accuracy {accuracy:g}")
    if kind in ("notice", "warning"):
        return f"{'note' if kind == 'notice' else kind}: {event['text']}"
    if kind == "error":
        return f"error: {event['type']}: {event['message']}"
    return f"{kind}: " + ", ".join(f"{k} {v}" for k, v in event.items() if k != "event")


def parse(line: str) -> dict | None:
    """The event a log line holds, or None for any other line.

    >>> parse('    pflpipe-event {"event": "notice", "text": "1 torch thread"}')
    {'event': 'notice', 'text': '1 torch thread'}
    >>> parse("pflpipe-event not json"), parse("a line of the stage's own output")
    (None, None)
    """
    text = line.lstrip()
    if not text.startswith(TAG):
        return None
    try:
        event = json.loads(text[len(TAG):])
    except ValueError:
        return None
    return event if isinstance(event, dict) and event.get("event") in KINDS else None


def progress(round_idx: int, rounds: int, mean_val_accuracy: float | None = None) -> None:
    """A finished round (`mean_val_accuracy` left out when None or NaN)."""
    extra = ({} if mean_val_accuracy is None or math.isnan(mean_val_accuracy)
             else {"mean_val_accuracy": round(float(mean_val_accuracy), 4)})
    emit("progress", round=int(round_idx), rounds=int(rounds), **extra)


def round_progress(rounds: int) -> Callable[[int, list[dict]], None]:
    """An engine `on_round` callback: a progress event with the mean validation accuracy.

    Rows are the engine's per-client scores of the round; without a validation split (scored
    NaN) the event has no mean.
    """
    def on_round(round_idx: int, rows: list[dict]) -> None:
        accuracy = [r["accuracy"] for r in rows if r["split"] == "val"
                    and r.get("accuracy") not in (None, "") and not math.isnan(r["accuracy"])]
        progress(round_idx, rounds, sum(accuracy) / len(accuracy) if accuracy else None)

    return on_round


def notice(text: str, *, reused: bool = False) -> None:
    """What the stage did beyond running; `reused`: all it did was reuse earlier work."""
    emit("notice", text=text, **({"reused": True} if reused else {}))


def warning(text: str) -> None:
    """A caveat about the stage's result."""
    emit("warning", text=text)


#: The output artifact's metadata key that names its task (`stage`'s `named`).
TASK = "pflpipe.task"


@contextmanager
def stage(name: str, *, named=None, **identity) -> Iterator[None]:
    """Report a stage: started on entry, then a result, or an error (its class) if it raised.

    `identity`: seed, label, shard... (None and "" left out). `named`: an output artifact whose
    metadata keeps the stage and its identity (under `TASK`): a runner that serves the task from
    its cache keeps the outputs' metadata, not the events, and reads who the task was from it.
    A component's body::

        with events.stage("personalize", named=summary, seed=seed, label=label, shard=shard):
            ...
    """
    identity = {k: v for k, v in identity.items() if v not in (None, "")}
    if named is not None:
        named.metadata[TASK] = {"stage": name, **identity}
    with addressed_to("runner"):
        emit("started", stage=name, **identity)
        try:
            yield
        except BaseException as err:
            emit("error", type=type(err).__name__, message=str(err),
                 bad_input=isinstance(err, BAD_INPUT))
            raise
        emit("result", stage=name)
