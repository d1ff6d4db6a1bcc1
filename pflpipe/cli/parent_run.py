"""The MLflow parent run of ``pflpipe run``: opened and ended by forked children.

The parent run's id is a parameter of the pipeline, so the run is opened before the pipeline
starts: a forked child opens it (mlflow, its store, a new store's migrations: ~2.5 CPU s) on
another core while the CLI imports kfp (~1 s), sends it and exits. Its mlflow (~220 MB) is gone
before the first stage starts, so it never sits beside the training stages in memory.

A second child, forked beside it, ends the run: it waits without mlflow (a copy of the CLI
before kfp, its pages shared with it) until the pipeline's last stage starts (`ENDS_AFTER`, the
report, which runs on every run) or a stage is served from kfp's cache (a rerun: at once, so
that nothing waits for mlflow at its end; a run that reuses some stages and trains others then
holds mlflow beside them), then imports mlflow and opens the store while the pipeline runs, and
ends the run with the status the CLI sends (FINISHED, FAILED, KILLED). So the CLI itself
never imports mlflow on a run that succeeds. Nothing forks on one core, nor while another
thread runs here (`pflpipe.run` in a notebook's or a server's process): then the run is opened
and ended here.
"""

import os
import sys
import threading

#: The stage whose start readies the child that will end the parent run.
ENDS_AFTER = "evaluate_fairness"


def open_beside_kfp(spec, spec_yaml: str | None, cores: int):
    """Open the MLflow parent run in a forked child while this process imports kfp.

    Returns the run's `RunEnd` (`InPlace` when nothing forks), its `parent` the run.
    """
    if not (spec.tracking.enabled and cores > 1 and threading.active_count() == 1):
        return InPlace(_open_parent(spec, spec_yaml, os.getpid()))
    import multiprocessing

    context = multiprocessing.get_context("fork")
    sys.stdout.flush()  # the children must not write this process's buffered output again
    sys.stderr.flush()
    ender, ender_end = context.Pipe()
    ends = context.Process(target=_end_in_child, args=(ender_end, ender), daemon=True,
                           name="MLflow parent run end")
    ends.start()   # first: a copy of this process as it is, without mlflow
    ender_end.close()
    opener, opener_end = context.Pipe()
    opens = context.Process(target=_open_in_child, args=(spec, spec_yaml, os.getpid(),
                                                         opener_end, (opener, ender)),
                            daemon=True, name="MLflow parent run")
    opens.start()
    opener_end.close()
    import pflpipe.pipelines.local_runner  # noqa: F401 - kfp and the pipeline's graph, meanwhile

    try:
        parent = _answer(opener, opens, "opens")
    except BaseException:
        ender.close()   # no run to end: the second child exits
        ends.join()
        raise
    finally:
        opener.close()
        opens.join()
    return RunEnd(parent, ender, ends)


class InPlace:
    """A parent run opened here and ended here."""

    def __init__(self, parent):
        self.parent = parent

    def prepare(self) -> None:
        """Nothing to ready: this process ends the run."""

    def finish(self, status: str) -> None:
        """End the parent run with `status`."""
        self.parent.finish(status)


class RunEnd:
    """The child that ends the parent run: `prepare` readies it, `finish` tells it the status."""

    def __init__(self, parent, pipe, child):
        self.parent, self._pipe, self._child = parent, pipe, child
        self._lock = threading.Lock()   # `prepare` comes from the runner's threads
        self._prepared = False

    def prepare(self) -> None:
        """Have the child import mlflow and open the store now (once), while a stage runs."""
        import contextlib

        with self._lock:
            if not self._prepared:
                self._prepared = True
                with contextlib.suppress(OSError):   # a child gone: `finish` says so
                    self._pipe.send(("prepare", self.parent))

    def finish(self, status: str) -> None:
        """End the parent run with `status` (FINISHED, FAILED, KILLED) through the child."""
        import contextlib

        try:
            with self._lock, contextlib.suppress(OSError):   # a child gone: `_answer` says so
                self._pipe.send(("end", self.parent, status))
            _answer(self._pipe, self._child, "ends")
        finally:
            self._pipe.close()
            self._child.join()


def _answer(pipe, child, what: str):
    """The child's answer on `pipe`; its exception raised here; a TrackingError if it died."""
    try:
        outcome, value = pipe.recv()
    except (EOFError, OSError):   # killed (the OOM killer): not this pipe's reader gone
        from pflpipe.errors import TrackingError

        child.join()
        raise TrackingError(f"the process that {what} the MLflow parent run died (exit "
                            f"{child.exitcode}) without an answer") from None
    if outcome == "error":
        raise value
    return value


def _open_in_child(spec, spec_yaml: str | None, owner_pid: int, pipe, theirs: tuple) -> None:
    """Open the parent run and send it (forked child); then exit.

    `theirs`: the CLI's ends of the pipes, which a fork copies; closed here, so that the
    other child sees the CLI's end close when the CLI closes it.
    """
    for end in theirs:
        end.close()
    _answering(pipe, lambda: _open_parent(spec, spec_yaml, owner_pid))


def _end_in_child(pipe, theirs) -> None:
    """Wait; ready mlflow and the store when told; end the run with the status sent (forked).

    `theirs` is the CLI's end of the pipe (a fork's copy: closed here, so that a CLI gone is
    the end of the pipe). Without a status (the CLI is gone, or opening the run failed) the run,
    if any, stays RUNNING, and the next run on this host marks it KILLED
    (`close_abandoned_runs`).
    """
    theirs.close()

    def end():
        from pflpipe.tracking.runs import ready_to_finish

        message = pipe.recv()   # ("prepare", parent), or at once ("end", parent, status)
        ready_to_finish(message[1].tracking_uri)
        if message[0] == "prepare":
            message = pipe.recv()
        _, parent, status = message
        parent.finish(status)

    _answering(pipe, end)


def _answering(pipe, work) -> None:
    """Send `work()`'s result, or its exception, on `pipe`; Ctrl-C is the CLI's to handle.

    Ctrl-C reaches the whole process group; the CLI, not a child, says the run was KILLED.
    """
    import signal

    from pflpipe.beside import picklable

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pipe.send(("ok", work()))
    except EOFError:   # the CLI is gone
        pass
    except BaseException as err:  # every failure goes back to the CLI
        pipe.send(("error", picklable(err)))
    finally:
        pipe.close()


def _open_parent(spec, spec_yaml: str | None, owner_pid: int):
    """Open the MLflow parent run (`open_parent_run`), mlflow's own INFO lines quieted."""
    from pflpipe.tracking import open_parent_run
    from pflpipe.tracking.runs import quiet_mlflow_logs

    if spec.tracking.enabled:   # no MLflow run to open: mlflow is not imported (~1 CPU s)
        quiet_mlflow_logs()
    return open_parent_run(spec, spec_yaml=spec_yaml, owner_pid=owner_pid)
