"""Where the quickstart's wall time goes: each task's wall (kfp.local) and its process's CPU.

    python benchmarks/startup.py [--spec specs/persfl-digits.yaml] [--work DIR] [--set K=V ...]
        [--base REV] [--rerun] [--runner subprocess|docker ...] [--repeat N] [--profile]

Runs ``pflpipe run SPEC`` into a new results folder with a new MLflow sqlite store (a first
run, as on a fresh machine: nothing cached, nothing to resume), with a ``sitecustomize`` hook
on PYTHONPATH that makes every Python process of the run (the CLI and each task) append its CPU
seconds (user + sys, from ``getrusage``), those of the processes it forked (a figure drawn
beside: `beside`) and its fsync calls and their seconds to a JSON-lines file when it exits.
Prints one row per task: its wall time from kfp.local's log (start of the task to its end,
process start-up and exit included), its process's CPU seconds, its forked children's, its
fsyncs, the CLI's own CPU and its forked children's (its children's CPU less the tasks': the
process that holds the MLflow parent run, plus what each task spends after its record, its
interpreter's exit and kfp's shell), the run's wall and CPU, and the load average before and
after (the machine is shared: compare runs made side by side). ``--profile`` also writes a
cProfile (CPU clock) of every process.

Side by side, in one run: ``--base REV`` also measures pflpipe as of git revision REV (exported
with ``git archive`` and put first on PYTHONPATH, with this checkout's virtualenv) and prints
each task's wall and CPU before (REV) and after (this checkout) in adjacent columns, the two
alternating run by run (``--repeat N``: N runs of each, the median shown); ``--rerun`` adds a
cached rerun (``pflpipe run SPEC`` again into the same folder and store, nothing changed: every
training task is served from kfp.local's cache) after every first run; two
``--runner``s (``--runner subprocess --runner docker``) compare the runners back to back on this
checkout (docker needs a container engine: ../shared/tools/container-engine.sh), and then time
what a container costs by itself: kfp.local's own call (`run_docker_container`: list the images,
create and start the container, stream its log, wait, auto-remove) of the run's image with the
command ``true`` and with ``python -c "import pflpipe.events"`` (the interpreter a task starts),
5 times each, which is the floor under every task's extra wall in its container.
"""

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Loaded by every Python process of the run (PYTHONPATH); records its CPU and fsyncs at exit.
HOOK = '''
import os
if os.environ.get("PFLPIPE_STARTUP_LOG"):
    import atexit, json, resource, sys, time
    _fsyncs, _fsync = [0, 0.0], os.fsync

    def _counted(fd):
        start = time.monotonic()
        try:
            return _fsync(fd)
        finally:
            _fsyncs[0] += 1
            _fsyncs[1] += time.monotonic() - start

    os.fsync = _counted

    def _record():
        argv = sys.argv
        name = (argv[argv.index("--function_to_execute") + 1]
                if "--function_to_execute" in argv else os.path.basename(argv[0]))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        forked = resource.getrusage(resource.RUSAGE_CHILDREN)   # e.g. a figure drawn beside
        with open(os.environ["PFLPIPE_STARTUP_LOG"], "a") as out:
            out.write(json.dumps({"name": name, "cpu": usage.ru_utime + usage.ru_stime,
                                  "children_cpu": forked.ru_utime + forked.ru_stime,
                                  "fsyncs": _fsyncs[0], "fsync_s": _fsyncs[1]}) + "\\n")

    atexit.register(_record)  # registered first, so it runs after every other exit handler
    if os.environ.get("PFLPIPE_STARTUP_PROFILE"):   # --profile: cProfile, CPU clock, per process
        import cProfile
        _profile = cProfile.Profile(time.process_time)

        def _dump():
            _profile.disable()
            argv = sys.argv
            name = (argv[argv.index("--function_to_execute") + 1]
                    if "--function_to_execute" in argv else os.path.basename(argv[0]))
            _profile.dump_stats(os.path.join(os.environ["PFLPIPE_STARTUP_PROFILE"],
                                             f"{name}-{os.getpid()}.prof"))

        atexit.register(_dump)
        _profile.enable()
'''
TASK = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - \w+ - (?:Executing task '([\w-]+)'|"
                  r"Task '([\w-]+)' finished)", re.M)


def task_walls(pipeline_log: Path, start: int = 0) -> dict[str, float]:
    """Seconds from "Executing task" to "finished" of every task in kfp.local's log.

    `start`: the log's length before the run (a rerun appends to it).
    """
    marks: dict[str, list[datetime]] = {}
    for match in TASK.finditer(pipeline_log.read_text()[start:]):
        name = match.group(2) or match.group(3)
        marks.setdefault(name, []).append(datetime.strptime(match.group(1), "%H:%M:%S.%f"))
    return {name: (t[-1] - t[0]).total_seconds() for name, t in marks.items() if len(t) == 2}


def load() -> str:
    """The 1-minute load average."""
    return f"{os.getloadavg()[0]:.1f}"


def measure(source: Path | None, work: Path, args, runner: str, rerun: bool
            ) -> dict[str, dict[str, dict[str, float]]]:
    """Run the spec (and a cached rerun) with `source` first on PYTHONPATH; rows by run kind."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "hook").mkdir(exist_ok=True)
    (work / "hook" / "sitecustomize.py").write_text(HOOK)
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [
                            str(work / "hook"), str(source or ""), os.environ.get("PYTHONPATH")])),
                        "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    if args.profile:
        (work / "profiles").mkdir(exist_ok=True)
        env["PFLPIPE_STARTUP_PROFILE"] = str(work / "profiles")
    out = {}
    for kind in ("first", "rerun") if rerun else ("first",):
        records = work / f"processes-{kind}.jsonl"
        records.unlink(missing_ok=True)
        command = [str(Path(sys.executable).with_name("pflpipe")), "run", str(args.spec),
                   "--runner", runner,
                   "--results", str(work / "results"), *(f"--set={s}" for s in args.set)]
        log = work / "results" / "logs" / "pipeline.log"
        logged = len(log.read_text()) if log.is_file() else 0
        before, start, cpu = load(), time.monotonic(), os.times()
        subprocess.run(command, check=True, env=env | {"PFLPIPE_STARTUP_LOG": str(records)},
                       cwd=work, stdout=subprocess.DEVNULL)
        wall, after = time.monotonic() - start, os.times()
        by_name = {}
        for line in records.read_text().splitlines():
            process = json.loads(line)
            by_name[process["name"]] = process
        rows = {}
        for name, seconds in task_walls(log, logged).items():
            process = by_name.get(name.replace("-", "_"), {})
            rows[name] = {"wall": seconds, "cpu": process.get("cpu", float("nan")),
                          "beside": process.get("children_cpu", 0.0),
                          "fsyncs": process.get("fsyncs", 0), "fsync_s": process.get("fsync_s", 0)}
        cli = by_name.get("pflpipe", {})
        rows["CLI (own CPU)"] = {"wall": float("nan"), "cpu": cli.get("cpu", float("nan"))}
        # the CLI's children are the tasks and what the CLI forked (the MLflow parent run)
        tasks = sum(p["cpu"] + p["children_cpu"] for n, p in by_name.items() if n != "pflpipe")
        rows["CLI (forked)"] = {"wall": float("nan"),
                                "cpu": cli.get("children_cpu", float("nan")) - tasks}
        rows["run"] = {"wall": wall, "cpu": (after.children_user + after.children_system)
                       - (cpu.children_user + cpu.children_system),
                       "load": f"{before} → {load()}"}
        out[kind] = rows
    return out


def export(revision: str, into: Path) -> Path:
    """pflpipe as of git `revision`, importable from `into` (components and pipelines inside)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for name in ("components", "pipelines"):   # as the install maps them: pflpipe.<name>
        (into / "pflpipe" / name).symlink_to(into / name)
    return into


def median(values: list[float]) -> float:
    """The median (NaN-free values; NaN for none)."""
    values = sorted(v for v in values if v == v)
    if not values:
        return float("nan")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def table(title: str, columns: dict[str, list[dict]], full: bool) -> None:
    """Print one kind of run: a row per task, each column's wall and CPU (medians)."""
    names = list(dict.fromkeys(n for runs in columns.values() for rows in runs for n in rows))
    last = ["CLI (own CPU)", "CLI (forked)", "run"]
    names = [n for n in names if n not in last] + [n for n in last if n in names]
    print(f"\n{title}")
    header = f"{'task':24s}" + "".join(f" {c + ' wall':>14s} {c + ' CPU':>12s}" for c in columns)
    if full:
        header += f" {'beside':>7s} {'fsyncs':>7s} {'fsync s':>7s}"
    print(header)
    for name in names:
        line = f"{name:24s}"
        for runs in columns.values():
            cells = [rows.get(name, {}) for rows in runs]
            wall = median([c.get("wall", float("nan")) for c in cells])
            cpu = median([c.get("cpu", float("nan")) for c in cells])
            line += f" {'' if wall != wall else f'{wall:.1f}':>14s} {cpu:12.1f}"
        if full:
            cell = next(iter(columns.values()))[-1].get(name, {})
            if "fsyncs" in cell:
                line += (f" {cell['beside']:7.1f} {cell['fsyncs']:7d} {cell['fsync_s']:7.2f}")
        print(line)
    for column, runs in columns.items():
        print(f"  {column}: load {', '.join(rows['run']['load'] for rows in runs)}")


def container_floor(args, times: int = 5) -> None:
    """Print the seconds of an empty container through kfp.local's call, and of one that starts
    Python and imports a pflpipe module (the run's image: its `resources.image`)."""
    import docker
    from kfp.local.docker_task_handler import run_docker_container

    from pflpipe.spec import read_spec
    from pflpipe.spec.overrides import parse_assignments

    spec = read_spec(args.spec, parse_assignments(args.set))
    client = docker.from_env()
    for command in (["true"], ["python", "-c", "import pflpipe.events"]):
        seconds = []
        for _ in range(times):
            start = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):   # its "Found image ..." line
                code = run_docker_container(client, spec.resources.image, command, {})
            seconds.append(time.monotonic() - start)
            assert code == 0, f"{command} exited {code}"
        print(f"a container of {spec.resources.image} running {' '.join(command)!r} through "
              f"kfp.local's run_docker_container: {sorted(seconds)[times // 2]:.2f} s (median of "
              f"{times}; {min(seconds):.2f}–{max(seconds):.2f}); load {load()}")


def main() -> int:
    """Run the spec (each tree, runner and kind of run) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "specs" / "persfl-digits.yaml")
    parser.add_argument("--work", type=Path, help="where the runs go (default: a temporary dir)")
    parser.add_argument("--profile", action="store_true",
                        help="also write a cProfile (CPU clock) of every process to WORK/.../"
                             "profiles")
    parser.add_argument("--set", action="append", default=[], help="a --set of pflpipe run")
    parser.add_argument("--base", metavar="REV",
                        help="also measure git revision REV, side by side (before | after)")
    parser.add_argument("--rerun", action="store_true",
                        help="also time a cached rerun (nothing changed) after each first run")
    parser.add_argument("--runner", action="append", choices=("subprocess", "docker"),
                        help="the runner (default subprocess); twice: both, back to back")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each column (median)")
    args = parser.parse_args()
    args.spec = args.spec.absolute()
    work = (args.work or Path(tempfile.mkdtemp(prefix="pflpipe-startup-"))).absolute()
    runners = args.runner or ["subprocess"]
    trees = {}
    if args.base:
        commit = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.strip()
        trees["before"] = export(args.base, work / f"src-{commit}")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        print(f"before: {args.base} ({commit}); after: this checkout ({head}"
              f"{', with uncommitted changes' if dirty else ''})")
    columns = {(tree, runner): [] for tree in [*trees, "after" if trees else "this"]
               for runner in (runners if tree in ("after", "this") else runners[:1])}
    results: dict[tuple, list] = {c: [] for c in columns}
    print(f"{args.spec.name}: {work}")
    for repeat in range(args.repeat):   # alternate the columns, their order flipped each time
        order = list(columns) if repeat % 2 == 0 else list(reversed(columns))
        for tree, runner in order:
            name = f"{tree}-{runner}-{repeat}"
            results[(tree, runner)].append(measure(trees.get(tree), work / name, args, runner,
                                                   args.rerun))
    if "docker" in runners:
        container_floor(args)
    label = {c: c[0] + (f" {c[1][:6]}" if len(runners) > 1 else "") for c in columns}
    for kind in ("first", "rerun") if args.rerun else ("first",):
        title = ("first run (new results folder, new sqlite store)" if kind == "first"
                 else "cached rerun (pflpipe run again, nothing changed)")
        table(title, {label[c]: [r[kind] for r in results[c]] for c in columns},
              full=len(columns) == 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
