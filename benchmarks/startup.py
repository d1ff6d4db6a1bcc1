"""Where the quickstart's wall time goes: each task's wall (kfp.local) and its process's CPU.

    python benchmarks/startup.py [--spec specs/persfl-digits.yaml] [--work DIR] [--set K=V ...]

Runs ``pflpipe run SPEC --fresh`` into a new results folder with a new MLflow sqlite store (a
first run, as on a fresh machine), with a ``sitecustomize`` hook on PYTHONPATH that makes every
Python process of the run (the CLI and each task) append its CPU seconds (user + sys, from
``getrusage``), those of the processes it forked (a figure drawn beside: `beside`) and its fsync
calls and their seconds to a JSON-lines file when it exits. Prints one row per task: its wall
time from kfp.local's log (start of the task to its end, process start-up and exit included),
its process's CPU seconds, its forked children's, its fsyncs, the CLI's own CPU, the run's wall
and CPU, and the load average before and after (the machine is shared: compare runs made side
by side). ``--profile`` also writes a cProfile (CPU clock) of every process.
"""

import argparse
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


def task_walls(pipeline_log: Path) -> dict[str, float]:
    """Seconds from "Executing task" to "finished" of every task in kfp.local's log."""
    marks: dict[str, list[datetime]] = {}
    for match in TASK.finditer(pipeline_log.read_text()):
        name = match.group(2) or match.group(3)
        marks.setdefault(name, []).append(datetime.strptime(match.group(1), "%H:%M:%S.%f"))
    return {name: (t[-1] - t[0]).total_seconds() for name, t in marks.items() if len(t) == 2}


def load() -> str:
    """The 1-minute load average."""
    return f"{os.getloadavg()[0]:.1f}"


def main() -> int:
    """Run the spec once and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "specs" / "persfl-digits.yaml")
    parser.add_argument("--work", type=Path, help="where the run goes (default: a temporary dir)")
    parser.add_argument("--profile", action="store_true",
                        help="also write a cProfile (CPU clock) of every process to WORK/profiles")
    parser.add_argument("--set", action="append", default=[], help="a --set of pflpipe run")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="pflpipe-startup-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    (work / "hook").mkdir(exist_ok=True)
    (work / "hook" / "sitecustomize.py").write_text(HOOK)
    records = work / "processes.jsonl"
    records.unlink(missing_ok=True)
    env = os.environ | {"PFLPIPE_STARTUP_LOG": str(records),
                        "PYTHONPATH": os.pathsep.join(filter(None, [
                            str(work / "hook"), os.environ.get("PYTHONPATH")])),
                        "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    if args.profile:
        (work / "profiles").mkdir(exist_ok=True)
        env["PFLPIPE_STARTUP_PROFILE"] = str(work / "profiles")
    command = [str(Path(sys.executable).with_name("pflpipe")), "run", str(args.spec), "--fresh",
               "--results", str(work / "results"), *(f"--set={s}" for s in args.set)]
    before, start, cpu = load(), time.monotonic(), os.times()
    subprocess.run(command, check=True, env=env, cwd=work, stdout=subprocess.DEVNULL)
    wall, cpu = time.monotonic() - start, os.times()
    processes = [json.loads(line) for line in records.read_text().splitlines()]
    by_name = {p["name"]: p for p in processes}
    print(f"{args.spec.name}: {work}; load {before} before, {load()} after")
    print(f"{'task':24s} {'wall s':>7s} {'CPU s':>7s} {'beside':>7s} {'fsyncs':>7s} "
          f"{'fsync s':>7s}")
    for name, seconds in task_walls(work / "results" / "logs" / "pipeline.log").items():
        process = by_name.get(name.replace("-", "_"), {})
        print(f"{name:24s} {seconds:7.1f} {process.get('cpu', float('nan')):7.1f} "
              f"{process.get('children_cpu', 0):7.1f} {process.get('fsyncs', 0):7d} "
              f"{process.get('fsync_s', 0):7.2f}")
    cli = by_name.get("pflpipe", {})
    print(f"{'CLI (own CPU)':24s} {'':7s} {cli.get('cpu', float('nan')):7.1f}")
    print(f"{'run':24s} {wall:7.1f} {cpu.children_user + cpu.children_system:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
