"""``pflpipe run SPEC``: the whole pipeline on the local kfp runner, tracked in MLflow.

The CLI opens the MLflow parent run, runs the pipeline under kfp.local's SubprocessRunner (one
Python subprocess per task, in this environment), shows each stage as it finishes, copies the
report and every seed's results into a folder of the run's own (``runs/<time>-<run>/``, with
``latest`` pointing at it) and says where everything is. `execute` is also what `pflpipe.run`
calls. kfp itself is imported by `pflpipe.pipelines`, inside the handler.
"""

import errno
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "run", help="Run the whole pipeline on the local kfp runner (MLflow tracking).",
        description="Run every stage of the spec's pipeline on kfp.local (SubprocessRunner, "
        "no Docker), track it in MLflow and write the report and every seed's models into the "
        "results directory (a folder per run; latest points at the newest). Every training stage "
        "is cached on the settings it reads: a rerun with one more algorithm runs only that "
        "algorithm's stage. Exit 1 if a stage fails, 2 on a bad spec.")
    parser.add_argument("spec", type=Path, metavar="SPEC")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help="Results directory (default: experiment.output_dir, else "
                        "results/<experiment name>).")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--no-cache", action="store_true",
                       help="Recompute every stage that finished before: no cached outputs, no "
                       "finished checkpoints. A stage an earlier run left unfinished resumes "
                       "from its last round.")
    again.add_argument("--fresh", action="store_true",
                       help="Recompute everything from round 0: no cached outputs, every "
                       "checkpoint of an earlier run discarded.")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch threads per stage (engine.threads; default: the cores "
                        "divided by the tasks run at once).")
    parser.add_argument("--parallel", type=int, metavar="N",
                        help="Tasks (seeds, algorithms) run at once (engine.parallel_tasks; "
                        "default 2, kfp.local's most per loop).")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="Override a spec setting, validated like the file, e.g. --set "
                        "federation.rounds=50 or --set personalization.ditto.lam=0.2 "
                        "(repeatable; values are YAML).")
    parser.add_argument("--runner", choices=RUNNERS, default="subprocess",
                        help="subprocess (default): every task a Python process here; docker: "
                        "every task in its stage's image (resources.image) through Docker or "
                        "podman ($DOCKER_HOST), with the working and results directories "
                        "mounted (docs/images.md).")
    parser.set_defaults(handler=run)


#: kfp.local's runners: `pflpipe run --runner`.
RUNNERS = ("subprocess", "docker")


def run(args) -> int:
    """Run the pipeline; finish the MLflow parent run FINISHED, FAILED or KILLED."""
    from rich.console import Console

    from pflpipe.cli.validate_verb import checked_model
    from pflpipe.spec import read_spec
    from pflpipe.spec.overrides import parse_assignments

    spec = with_run_control(
        with_results_dir(read_spec(args.spec, parse_assignments(args.set)), args.results),
        threads=args.threads, parallel=args.parallel)
    from pflpipe.overwrite import check_directory

    # before any work (an MLflow parent run, a stage): the results go into a folder
    check_directory(Path(spec.experiment.results_dir),
                    "--results" if args.results else "experiment.output_dir")
    if spec.model.architecture == "custom":   # (a built-in model: no torch import here)
        checked_model(spec, args.spec)  # what validate finds (model.path: os:system), now
    resume = "none" if args.fresh else "unfinished" if args.no_cache else "all"
    # kfp.local swaps sys.stdout during the run; the console keeps the real one.
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    execute(spec, args.spec.read_text(encoding="utf-8"), console, resume=resume,
            runner=args.runner)
    return 0


@dataclass(frozen=True)
class Outcome:
    """What one run did and wrote: its stages, the published copies by name, the parent run."""

    run_dir: Path
    copies: dict[str, Path]
    parent: object
    tasks: tuple = ()


def execute(spec, spec_yaml: str | None, console, *, resume: str = "all",
            runner: str = "subprocess") -> Outcome:
    """Open the parent run, run the pipeline, publish its results; show it on `console`.

    `resume` is the pipeline's: "all" reuses cached stages and checkpoints, "unfinished"
    (``--no-cache``) recomputes finished stages, "none" (``--fresh``) everything. `runner`:
    one of `RUNNERS`; under "docker" a spec whose tasks would touch a path the containers do not
    share, or name an image the engine lacks, is refused before anything starts.
    """
    from pflpipe.cli.parent_run import ENDS_AFTER, open_beside_kfp
    from pflpipe.disk import check_free_space
    from pflpipe.storage import check_store
    from pflpipe.tracking import record_failure
    from pflpipe.tracking.runs import without_credentials

    if runner not in RUNNERS:
        from pflpipe.cli import UsageError

        raise UsageError(f"runner must be one of {', '.join(RUNNERS)} (got {runner!r})")
    spec = without_credentials(spec)  # the tasks inherit them from the environment
    results_dir = Path(spec.experiment.results_dir)
    check_store(spec.storage)  # a silent or missing store fails here, before any stage runs
    check_free_space(spec, results_dir)  # a run that cannot fit fails before it writes
    containers = None
    if runner == "docker":
        from pflpipe.pipelines.containers import prepare

        containers = prepare(spec, results_dir)
    run_end = open_beside_kfp(spec, spec_yaml, _cores())
    parent = run_end.parent
    from pflpipe.pipelines.local_runner import StageFailed, publish, run_local

    def on_event(kind: str, task) -> None:
        progress.event(kind, task)
        if kind == "cached" or kind == "started" and task.stage == ENDS_AFTER:
            run_end.prepare()   # mlflow imported beside the report or cached stages

    _header(console, spec, parent, resume,
            containers.describe() if containers else "SubprocessRunner")
    progress = Progress(console)
    started = time.monotonic()
    try:
        with progress, component_tmpdir():
            local = run_local(spec, parent.pipeline_parameters() | {"resume": resume},
                              results_dir=results_dir, use_cache=resume == "all",
                              on_event=on_event,
                              runner=containers.runner if containers else None)
        run_dir, copies = publish(local, results_dir, parent.run_id)
        if spec.sweep:
            from pflpipe import layout
            from pflpipe.report.sweep_report import publish_sweep

            copies = {layout.REPORT_FOLDER: publish_sweep(spec, run_dir), **copies}
            if parent.run_id:   # the points' reports are on their own runs
                parent.tracker().log_artifact(copies[layout.REPORT_FOLDER], layout.REPORT_FOLDER)
    except BaseException as err:
        for task in (err.task, *err.others) if isinstance(err, StageFailed) else ():
            record_failure(parent, task.title, task.stage, task.error(), task.path,
                           {"algorithm": task.label or "",
                            "seed": "" if task.seed is None else str(task.seed)})
        run_end.finish("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
        if (full := disk_full(err, results_dir)) is not None:
            raise full from err
        raise
    run_end.finish("FINISHED")
    _summary(console, run_dir, copies, parent, results_dir, time.monotonic() - started)
    return Outcome(run_dir, copies, parent, local.tasks)


@contextmanager
def component_tmpdir() -> Iterator[Path]:
    """Give the run's tasks a temporary directory of their own (TMPDIR), removed afterwards.

    kfp.local's SubprocessRunner writes every task's code into a fresh ``mktemp -d`` folder
    (``tmp.*/ephemeral_component.py``) and never removes it; with TMPDIR pointing here, they all
    go when the run ends, whatever its outcome.
    """
    folder = Path(tempfile.mkdtemp(prefix="pflpipe-run-"))
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    try:
        yield folder
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        shutil.rmtree(folder, ignore_errors=True)


def disk_full(err: BaseException, results_dir: Path) -> Exception | None:
    """The one-line error for a run that ran out of disk space (None for any other error)."""
    from pflpipe.errors import PflpipeError

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = err.filename or results_dir
    elif "No space left on device" in str(err) or "Disk quota exceeded" in str(err):
        where = results_dir
    else:
        return None
    free = shutil.disk_usage(results_dir).free if Path(results_dir).exists() else 0
    return PflpipeError(f"no space left on the device of {where} ({free:,} bytes free); free "
                        "some space or give --results a directory on another disk, then run the "
                        "same command again: finished stages are kept")


def with_results_dir(spec, results: Path | None):
    """Return `spec` with `experiment.output_dir` set to `results` (when given)."""
    if results is None:
        return spec
    data = spec.model_dump(mode="json", by_alias=True)
    data["experiment"]["output_dir"] = str(results)
    return type(spec).model_validate(data)


def with_run_control(spec, *, threads: int | None = None, parallel: int | None = None):
    """Return `spec` with the local run's `engine.threads` and `engine.parallel_tasks` set.

    Arguments override the spec. Unset, at most 2 tasks run at once (kfp.local's most per loop;
    1 on a one-core machine) and each gets an equal share of the cores, so parallel stages do
    not oversubscribe the CPU.
    """
    from pflpipe.cli import UsageError

    for flag, value in (("--threads", threads), ("--parallel", parallel)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be 1 or more (got {value})")
    cores = _cores()
    engine = spec.engine
    parallel = parallel or engine.parallel_tasks or min(LOCAL_PARALLEL, cores)
    threads = threads or engine.threads or max(1, cores // parallel)
    data = spec.model_dump(mode="json", by_alias=True)
    data["engine"] |= {"threads": threads, "parallel_tasks": parallel}
    return type(spec).model_validate(data)


def _cores() -> int:
    """The CPU cores this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


#: Tasks kfp.local runs at once by default (its ParallelFor runs at most 2 iterations at once).
LOCAL_PARALLEL = 2


class Progress:
    """Prints a line per finished stage; shows the running ones, with their round, on a terminal.

    The status line is rich's, drawn only on a terminal: quiet in tests, logs and CI.
    """

    SYMBOL = {"SUCCESS": "[green]✓[/]", "FAILURE": "[red]✗[/]", "CACHED": "[cyan]↺[/]"}

    def __init__(self, console):
        self.console = console
        self.running: dict[int, object] = {}
        self._lock = threading.Lock()
        self._status = console.status("starting", spinner="dots")

    def __enter__(self):
        self._status.__enter__()
        return self

    def __exit__(self, *exc):
        return self._status.__exit__(*exc)

    def event(self, kind: str, task) -> None:
        """Take an event of `TaskLogRouter` (called from the runner's threads)."""
        from rich.markup import escape

        from pflpipe.cli.text import wrap

        with self._lock:
            if kind in ("started", "progress"):
                self.running[id(task)] = task
            else:
                self.running.pop(id(task), None)
                when = "cached" if kind == "cached" else f"{task.seconds:5.1f} s"
                status = "CACHED" if task.status == "SUCCESS" and task.reused else task.status
                notes = f"  {'; '.join(task.notes)}" if task.notes else ""
                first, *rest = wrap(f"  ? {task.title:<40} {when:>8}{notes}", NOTE_INDENT)
                self.console.print(f"  {self.SYMBOL.get(status, '?')}{escape(first[3:])}")
                for line in rest:
                    self.console.print(escape(line))
            names = ", ".join(escape(_running(t)) for t in self.running.values())
            self._status.update(f"running {names}" if names else "between stages")


#: Where a stage's wrapped note and a wrapped closing line continue.
NOTE_INDENT, SUMMARY_INDENT = 6, 11


def _running(task) -> str:
    """A running task for the status line: its title and, once known, its round."""
    if task.progress is None:
        return task.title
    return f"{task.title} (round {task.progress[0]}/{task.progress[1]})"


#: What each `resume` value of the pipeline means, for the header.
RESUME_TEXT = {"all": "cached stages and checkpoints reused",
               "unfinished": "--no-cache: finished stages recomputed, unfinished ones resumed",
               "none": "--fresh: everything recomputed from round 0"}


def _header(console, spec, parent, resume: str, runner: str) -> None:
    from pflpipe.pipelines.graph import model_names

    clients = spec.partition.n_clients or "the predefined file's"
    engine = spec.engine
    console.print(f"[bold]{spec.experiment.name}[/]: {spec.dataset.name}, {clients} clients, "
                  f"seeds {spec.experiment.seeds}, algorithms {', '.join(model_names(spec))}")
    console.print(f"  kfp.local ({runner}) → {spec.experiment.results_dir}/kfp; "
                  f"{engine.parallel_tasks} task(s) at once × {engine.threads} torch thread(s); "
                  f"{RESUME_TEXT[resume]}")
    if spec.sweep:
        from pflpipe.spec.sweep import points

        found = points(spec)
        console.print(f"  sweep of {len(found)} points (the tasks a point does not change run "
                      f"once): {', '.join(p.label for p in found)}")
    if parent.run_id:
        console.print(f"  MLflow parent run {parent.run_id} in experiment "
                      f"{parent.experiment!r}")


def _summary(console, run_dir: Path, copies: dict[str, Path], parent, results_dir: Path,
             seconds: float) -> None:
    import json

    from rich.markup import escape

    from pflpipe import layout
    from pflpipe.cli.text import paragraphs

    report = copies["report"]
    if (report / layout.SWEEP_JSON).is_file():
        return _sweep_summary(console, run_dir, report, parent, results_dir, seconds)
    facts = json.loads((report / layout.REPORT_JSON).read_text(encoding="utf-8"))
    answer = facts.get("answer", "")

    say = functools.partial(_say, console)

    console.print(f"\n[bold green]done[/] in {seconds:.0f} s")
    say(f"  results  {run_dir}/  (also {results_dir / layout.LATEST}/)")
    say(f"  report   {report / layout.REPORT_HTML}  ({layout.REPORT_MD}, "
        f"{layout.REPORT_JSON}, {layout.FIGURES}/, {layout.REPORT_TABLES}/)")
    for name, path in copies.items():
        if name.startswith("seed-"):
            folders = sorted(p for p in path.iterdir() if (p / layout.MODELS).is_dir())
            per_client = [p.name for p in folders if layout.client_model_files(p)]
            shared = [p.name for p in folders if not layout.client_model_files(p)]
            one = "".join(f"; {m}/{layout.MODELS}/ (one global model)" for m in shared)
            say(f"  {name:<8} {path}/<model>/{layout.MODELS}/client_*.pt  "
                f"({', '.join(per_client)}){one}")
            say(f"  {'':<8} per-client table {path / layout.RESULTS_CSV}")
    say(f"  logs     {results_dir / layout.LOGS}/")
    if parent.run_id:
        console.print(f"  MLflow   run {parent.run_id} in experiment {parent.experiment!r}")
        if parent.tracking_uri.startswith("sqlite:"):
            console.print(f"           mlflow ui --backend-store-uri {parent.tracking_uri}")
        console.print(f"           {parent.ui_url()}")
    if answer:
        console.print(f"\n{escape(paragraphs(answer))}")


def _say(console, text: str) -> None:
    """Print `text` wrapped at 160 characters, continued under the summary's column."""
    from rich.markup import escape

    from pflpipe.cli.text import wrap

    for line in wrap(text, SUMMARY_INDENT):
        console.print(escape(line))


def _sweep_summary(console, run_dir: Path, report: Path, parent, results_dir: Path,
                   seconds: float) -> None:
    """The closing lines of a sweep: where its report is, and per point what the data say."""
    import json

    from pflpipe import layout

    facts = json.loads((report / layout.SWEEP_JSON).read_text(encoding="utf-8"))

    say = functools.partial(_say, console)

    console.print(f"\n[bold green]done[/] in {seconds:.0f} s: {len(facts['points'])} points")
    say(f"  results  {run_dir}/  (also {results_dir / layout.LATEST}/)")
    say(f"  report   {report / layout.REPORT_HTML}  (the points side by side; each point's own "
        f"in {run_dir / layout.POINTS}/<point>/{layout.REPORT_FOLDER}/)")
    say(f"  logs     {results_dir / layout.LOGS}/")
    if parent.run_id:
        say(f"  MLflow   run {parent.run_id} in experiment {parent.experiment!r}, a child run per "
            "point (tag sweep.point)")
        say(f"           {parent.ui_url()}")
    console.print("")
    for point in facts["points"]:
        say(f"  {point['label']}: {point['separated']}")
