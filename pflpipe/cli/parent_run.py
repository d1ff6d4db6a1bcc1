"""The MLflow parent run of ``pflpipe run``: opened and ended by child processes.

The parent run's id is a parameter of the pipeline, so the run is opened before the pipeline
starts: a forked child opens it (mlflow, its store, a new store's migrations: ~2.5 CPU s) on
another core while the CLI imports kfp (~1 s), sends it and exits. Its mlflow (~220 MB) is gone
before the first stage starts, so it never sits beside the training stages in memory.

A second child ends the run: spawned when the pipeline's last stage starts (`ENDS_AFTER`, the
report, which runs on every run, cached stages or not), it imports mlflow and opens the store
while that stage runs, then waits for the status the CLI sends (FINISHED, FAILED, KILLED). A
run that ends before that stage spawns it then. So the CLI itself never imports mlflow on a run
that succeeds. Not forked on one core, nor while another thread runs here (`pflpipe.run` in a
notebook's or a server's process): then the run is opened and ended here.
"""

import os
import sys
import threading

#: The stage whose start spawns the child that will end the parent run.
ENDS_AFTER = "evaluate_fairness"


def open_beside_kfp(spec, spec_yaml: str | None, cores: int):
    """Open the MLflow parent run in a forked child while this process imports kfp.

    Returns the parent run and its `RunEnd` (this process's `InPlace` when nothing forks).
    """
    if not (spec.tracking.enabled and cores > 1 and threading.active_count() == 1):
        return InPlace(_open_parent(spec, spec_yaml, os.getpid()))
    import multiprocessing

    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()
    sys.stdout.flush()  # the child must not write this process's buffered output again
    sys.stderr.flush()
    child = context.Process(target=_open_in_child, args=(spec, spec_yaml, os.getpid(), there),
                            name="MLflow parent run", daemon=True)
    child.start()
    there.close()
    import pflpipe.pipelines.local_runner  # noqa: F401 - kfp and the pipeline's graph, meanwhile

    try:
        return RunEnd(_answer(here, child, "opens"))
    finally:
        here.close()
        child.join()


class InPlace:
    """A parent run opened here and ended here."""

    def __init__(self, parent):
        self.parent = parent

    def prepare(self) -> None:
        """Nothing to start: this process ends the run."""

    def finish(self, status: str) -> None:
        """End the parent run with `status`."""
        self.parent.finish(status)


class RunEnd:
    """The child that ends the parent run: `prepare` spawns it, `finish` tells it the status."""

    def __init__(self, parent):
        self.parent = parent
        self._child = self._pipe = None
        self._lock = threading.Lock()   # `prepare` comes from the runner's threads

    def prepare(self) -> None:
        """Spawn the child (once), which imports mlflow and opens the store meanwhile."""
        import multiprocessing

        with self._lock:
            if self._child is not None or not self.parent.run_id:
                return
            context = multiprocessing.get_context("spawn")   # this process has threads now
            self._pipe, there = context.Pipe()
            self._child = context.Process(target=_end_in_child, args=(self.parent, there),
                                          name="MLflow parent run end", daemon=True)
            self._child.start()
            there.close()

    def finish(self, status: str) -> None:
        """End the parent run with `status` (FINISHED, FAILED, KILLED) through the child."""
        import contextlib

        self.prepare()
        if self._child is None:   # tracking off: no run
            return
        try:
            with contextlib.suppress(OSError):   # a child gone: `_answer` says so
                self._pipe.send(status)
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


def _open_in_child(spec, spec_yaml: str | None, owner_pid: int, pipe) -> None:
    """Open the parent run and send it (forked child); then exit."""
    _answering(pipe, lambda: _open_parent(spec, spec_yaml, owner_pid))


def _end_in_child(parent, pipe) -> None:
    """Ready mlflow and the store, then end the run with the status the CLI sends (spawned).

    Without a status (the CLI is gone) the run stays RUNNING, and the next run on this host
    marks it KILLED (`close_abandoned_runs`).
    """
    from pflpipe.tracking.runs import ready_to_finish

    def end():
        ready_to_finish(parent.tracking_uri)
        parent.finish(pipe.recv())

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
