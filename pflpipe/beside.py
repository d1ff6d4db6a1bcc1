"""Work a stage hands to a forked process, so that it runs on the other core.

kfp.local runs one task at a time (outside a loop), so a stage process has the machine to itself
and, on two cores, one of them idles. A stage gives a forked child the work that shares nothing
with its own, e.g. drawing a figure (matplotlib) while it trains or tracks (torch, mlflow):

    with Beside(draw, preload=("matplotlib.figure",)) as figure:   # forks; imports matplotlib
        grid = train()                                              # meanwhile, here
        figure.send(grid, path)                                     # the child draws
        write_the_rest()                                            # meanwhile, here
        figure.result()                # the child's return value, or its exception raised here

`Beside(work, args=(...))` starts the work at once with arguments the child inherits (nothing
pickled but the result). The child writes what `work` writes and sends back its return value or
its exception; a failure here ends the child (its pipe closes) and is raised as it was. Without
`fork` (not POSIX) the work runs here, in `result`. docs/performance.md, start-up.
"""

import importlib
import multiprocessing
import pickle
import sys
from collections.abc import Callable
from typing import Any


class Beside:
    """`work(*args)` in a forked child; the arguments given now (`args`) or later (`send`)."""

    def __init__(self, work: Callable[..., Any], *, args: tuple | None = None,
                 preload: tuple[str, ...] = (), name: str = "beside"):
        self.work, self.args = work, args
        self.child, self._outcome = None, None
        if "fork" not in multiprocessing.get_all_start_methods():
            return
        context = multiprocessing.get_context("fork")
        self._answers, answer = context.Pipe(duplex=False)
        inputs, self._give = context.Pipe(duplex=False) if args is None else (None, None)
        sys.stdout.flush()  # the child must not write this process's buffered output again
        sys.stderr.flush()
        self.child = context.Process(target=_child, daemon=True, name=name,
                                     args=(work, args, preload, inputs, self._give, answer))
        self.child.start()
        for end in (answer, inputs):  # the child's ends
            if end is not None:
                end.close()

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, *args) -> None:
        """Give the child the arguments of its work (when none were given at the start)."""
        if self.child is None:
            self.args = args
            return
        self._give.send(args)
        self._give.close()

    def result(self) -> Any:
        """Wait for the work; return its value, or raise its exception."""
        if self.child is None:
            return self.work(*self.args)
        outcome, value = self._wait()
        if outcome == "error":
            raise value
        return value

    def close(self) -> None:
        """End the child and wait for it; its outcome, if not asked for, is dropped.

        A child still waiting for its arguments gets none and stops.
        """
        if self.child is not None:
            self._wait()

    def _wait(self) -> tuple[str, Any]:
        if self._give is not None:
            self._give.close()
        if self._outcome is None:
            try:
                self._outcome = self._answers.recv()
            except EOFError:
                self._outcome = "error", RuntimeError(
                    f"the process {self.child.name!r} ended without an answer")
            self._answers.close()
            self.child.join()
        return self._outcome


def _child(work, args, preload, inputs, give, answer) -> None:
    """The child: import `preload`, wait for the arguments if needed, send the outcome."""
    if give is not None:
        give.close()  # the parent's end, inherited: else the child never sees the pipe close
    try:
        for module in preload:
            importlib.import_module(module)
        if args is None:
            try:
                args = inputs.recv()
            except EOFError:   # the parent gave up (it failed): nothing to do
                return
        answer.send(("ok", work(*args)))
    except BaseException as err:  # every failure goes back to the parent
        answer.send(("error", picklable(err)))
    finally:
        answer.close()


def picklable(err: BaseException) -> BaseException:
    """`err`, or a RuntimeError naming it where the process it goes back to cannot rebuild it."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")
    return err
