"""Run a spec's pipeline on kfp.local and find what it wrote.

By default every task runs as a Python subprocess of the current interpreter (SubprocessRunner,
`use_venv=False`), so the project and its dependencies must be installed here; nothing is
installed at run time. Given a DockerRunner (`pflpipe.pipelines.containers`), every task runs in
its stage's image instead. kfp.local
keeps every task's outputs under `pipeline_root`; `publish` hard-links the report and each seed's
results into a folder of their own per run (``runs/<time>-<MLflow run>/``) and points
``latest`` at it, so a rerun never overwrites what an earlier run published.
"""

import builtins
import contextlib
import logging
import os
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pflpipe.errors import PflpipeError
from pflpipe.layout import (
    KFP_CACHE,
    LATEST,
    LOGS,
    PIPELINE_LOG,
    REPORT_FOLDER,
    RUNS,
    link_tree,
    point_folder,
    seed_folder,
)
from pflpipe.pipelines.containers import containers_kept_until_exit
from pflpipe.pipelines.graph import build_pipeline
from pflpipe.pipelines.tasklog import TaskLog, TaskLogRouter


class StageFailed(PflpipeError):
    """A stage of the pipeline failed; the message names it and carries its own error."""

    def __init__(self, task: TaskLog, others: tuple[TaskLog, ...] = ()):
        self.task, self.others = task, others
        #: The stage refused its input (its error event says so): the CLI exits 2, not 1.
        self.bad_input = task.bad_input
        more = (f"\n  {len(others)} more failed: {', '.join(t.title for t in others)} (logs in "
                f"{task.path.parent})" if others else "")
        super().__init__(f"stage {task.title} failed:\n{_indent(task.error())}\n"
                         f"  (its full output: {task.path}){more}")


class RunnerFailed(PflpipeError):
    """Every stage succeeded, but kfp.local failed the run; the message carries its errors."""

    def __init__(self, errors: list[str], log: Path):
        shown = "\n".join(f"  {line}" for line in dict.fromkeys(errors))
        super().__init__(f"the local runner failed the pipeline after its stages:\n{shown}\n"
                         f"  (its log: {log})")


@dataclass(frozen=True)
class LocalRun:
    """Where one local run's outputs are."""

    report: Path | None           # evaluate_fairness's report directory (None: a sweep)
    seeds: dict[int, Path]        # collect_results' directory per seed (the report's metadata)
    tasks: tuple[TaskLog, ...]
    run_id: str = ""              # the MLflow parent run, else a random id (logs/events.jsonl)
    #: A sweep's points by label: each one's report directory and seeds, as `report`, `seeds`.
    points: dict[str, tuple[Path, dict[int, Path]]] = field(default_factory=dict)


def run_local(spec, arguments: dict[str, str], *, results_dir: Path, use_cache: bool = True,
              on_event: Callable[[str, TaskLog], None] = lambda kind, task: None,
              runner=None) -> LocalRun:
    """Run the pipeline of `spec` with `arguments` (its tracking parameters).

    kfp.local writes under ``results_dir/kfp`` and caches under ``results_dir/.kfp_cache``; the
    log of every task goes to ``results_dir/logs``; each line of its ``events.jsonl`` names the
    run (the MLflow parent run's id, else a random one), so reruns appended there stay apart.
    `runner`: kfp.local's runner (default: SubprocessRunner in this environment).

    Raises:
        StageFailed: a stage failed; its error and log file are in the message.

    """
    from kfp import local

    results_dir = Path(results_dir).absolute()
    runner = runner or local.SubprocessRunner(use_venv=False)
    local.init(runner=runner,
               pipeline_root=str(results_dir / "kfp"), raise_on_error=True,
               enable_caching=use_cache, cache_root=str(results_dir / KFP_CACHE))
    pipeline = build_pipeline(spec)
    run_id = arguments.get("parent_run_id") or uuid.uuid4().hex
    router = TaskLogRouter(results_dir / LOGS, on_event, run_id, cache_root=results_dir / KFP_CACHE)
    kept = (containers_kept_until_exit(runner) if isinstance(runner, local.DockerRunner)
            else nullcontext())
    try:
        with _routed(router), kept:
            task = pipeline(**arguments)
    except RuntimeError as err:
        failed = router.failures()
        if failed:
            raise StageFailed(failed[0], tuple(failed[1:])) from err
        if router.runner_errors:
            raise RunnerFailed(router.runner_errors, router.log_dir / PIPELINE_LOG) from err
        raise
    finally:
        router.close()
    if spec.sweep:
        from pflpipe.pipelines.graph import point_outputs
        from pflpipe.spec.sweep import points

        found = {point.label: _report(task.outputs[name])
                 for point, name in zip(points(spec), point_outputs(spec), strict=True)}
        return LocalRun(None, {}, tuple(router.tasks), run_id, found)
    return LocalRun(*_report(task.outputs["Output"]), tuple(router.tasks), run_id)


def _report(report) -> tuple[Path, dict[int, Path]]:
    """A report artifact's directory and its seeds' results directories (its metadata)."""
    return Path(report.path), {int(seed): Path(path)
                               for seed, path in report.metadata["seed_dirs"].items()}


def publish(run: LocalRun, results_dir: Path, run_id: str = "") -> tuple[Path, dict[str, Path]]:
    """Link the report and each seed's results into a new ``results_dir/runs/<name>/``.

    Every file there is a hard link to kfp.local's output under the pipeline root (a copy when
    the two are on different file systems, `layout.link_tree`): one copy on disk, and the
    pipeline root keeps what kfp's cache points at.

    The folder is named by the time and the run (``20261123-140512-1a2b3c4d``: the MLflow run,
    else the run's own id); earlier runs' folders are kept, and ``results_dir/latest`` is
    pointed at the new one. Returns the folder and its copies by name (``report``, ``seed-0``,
    ...; a sweep's: ``points/<label>/report``, ``points/<label>/seed-0``, ...).
    """
    results_dir = Path(results_dir)
    run_id = run_id or run.run_id
    name = f"{datetime.now():%Y%m%d-%H%M%S}" + (f"-{run_id[:8]}" if run_id else "")
    folder = results_dir / RUNS / name
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = results_dir / RUNS / f"{name}-{suffix}"
    copies = {REPORT_FOLDER: run.report,
              **{seed_folder(s): d for s, d in sorted(run.seeds.items())}}
    if run.points:   # a sweep: each point's report and seeds in a folder of its own
        copies = {f"{point_folder(label)}/{key}": path
                  for label, (report, seeds) in run.points.items()
                  for key, path in {REPORT_FOLDER: report, **{seed_folder(s): d for s, d in
                                                              sorted(seeds.items())}}.items()}
    out = {}
    for key, source in copies.items():
        out[key] = link_tree(source, folder / key)
    link = results_dir / f".{LATEST}.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(folder.relative_to(results_dir), target_is_directory=True)
    os.replace(link, results_dir / LATEST)
    return folder, out


@contextlib.contextmanager
def _routed(router: TaskLogRouter) -> Iterator[None]:
    """Send kfp.local's output to `router`, and silence what kfp.local warns about locally.

    kfp.local swaps the root logger's handlers around each task (from several threads at once
    in a ParallelFor), and logs cache hits outside that; a handler of ours forwards what reaches
    the root logger in between, so no line is lost. The Kubernetes settings of the tasks
    (resources, node selectors, the image name) have no effect under the SubprocessRunner;
    kfp.local warns about each of them on every task. kfp.local indents a task's output by
    swapping `builtins.print` per task, which tasks running at once in a ParallelFor restore out
    of order: the print in place before the run is put back after it.
    """
    print_ = builtins.print
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    forward = logging.StreamHandler(router)
    forward.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    root.handlers[:] = [forward]
    root.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(router):
            warnings.simplefilter("ignore")
            yield
    finally:
        builtins.print = print_
        root.handlers[:] = handlers
        root.setLevel(level)
        sys.stdout.flush()


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
