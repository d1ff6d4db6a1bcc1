"""A sweep against its points run one by one: wall, CPU and the tasks each ran, side by side.

    python benchmarks/sweep.py [--spec specs/persfl-digits-table.yaml] [--seeds 2] [--rounds 2]
                               [--set PATH=VALUE ...] [--sweep YAML] [--work DIR]

Runs the sweep spec once (`pflpipe.run`, one pipeline), then each of its points as a spec of its
own (the same settings and seeds), each into a fresh results folder with its own MLflow store (no
cache or checkpoint shared between them), in one process, one after the other. Prints per side
the wall time, the CPU seconds of this process and of every task process it waited for (user +
sys), the tasks that ran per stage, and the ratios; the load average before and after (the
machine may be shared: read the ratios, made side by side). `--seeds` and `--rounds` shrink
the spec (first N seeds; federation.rounds) for a quick look; `--set` overrides any setting, and
`--sweep` replaces the spec's sweep, e.g. ``--sweep '{personalization.fedper.lr: [0.01, 0.1]}'``
(a sweep whose points share tasks: the table spec's partitions share none).
"""

import argparse
import io
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds() -> float:
    """CPU of this process and of every process it (or its children) waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(run) -> tuple[float, float, Counter]:
    """Wall and CPU seconds of `run()`, and how many tasks of each stage ran (not cached)."""
    wall, cpu = time.monotonic(), cpu_seconds()
    with redirect_stdout(io.StringIO()):
        stages = run()
    ran = Counter(title.split(" ")[0].split("[")[0] for title, status in stages
                  if status != "CACHED")
    return time.monotonic() - wall, cpu_seconds() - cpu, ran


def main() -> None:
    """Run the sweep, then its points one by one; print both side by side."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "specs" / "persfl-digits-table.yaml")
    parser.add_argument("--seeds", type=int, help="Keep the spec's first N seeds.")
    parser.add_argument("--rounds", type=int, help="federation.rounds.")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="Override a setting, as pflpipe run --set (repeatable).")
    parser.add_argument("--sweep", metavar="YAML", help="Replace the spec's sweep section.")
    parser.add_argument("--work", type=Path, help="Working folder (default: a new temporary one).")
    args = parser.parse_args()

    import pflpipe
    from pflpipe.spec.sweep import points

    work = (args.work or Path(tempfile.mkdtemp(prefix="sweep-bench-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    spec_path = args.spec.absolute()
    os.chdir(work)   # each run's MLflow store: sqlite:///mlflow.db in its folder, below

    from pflpipe.spec.overrides import parse_assignments

    overrides = parse_assignments(args.set)
    seeds = pflpipe.load_spec(spec_path, **overrides).experiment.seeds
    if args.seeds:
        overrides["experiment.seeds"] = seeds[:args.seeds]
    if args.rounds:
        overrides["federation.rounds"] = args.rounds
    spec = pflpipe.load_spec(spec_path, **overrides)
    if args.sweep:   # a new sweep, not one merged into the spec's
        spec = pflpipe.load_spec(pflpipe.load_spec(spec, sweep=None),
                                 **parse_assignments([f"sweep={args.sweep}"]))
    found = points(spec)
    print(f"{spec_path.name}: {len(found)} points × {len(spec.experiment.seeds)} seeds, "
          f"{spec.federation.rounds} rounds; work in {work}")
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")

    def tracked(spec, folder: Path):
        folder.mkdir()
        tracking = {"tracking": {"uri": f"sqlite:///{folder}/mlflow.db"}}
        return pflpipe.run(pflpipe.load_spec(spec, **tracking), results=folder / "results",
                           quiet=True, resume="none").stages

    sweep = timed(lambda: tracked(spec, work / "sweep"))
    apart = [0.0, 0.0, Counter()]
    for index, point in enumerate(found):
        wall, cpu, ran = timed(lambda p=point, i=index: tracked(p.spec, work / f"point-{i}"))
        apart[0] += wall
        apart[1] += cpu
        apart[2] += ran
    print(f"load after:  {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    stages = sorted(set(sweep[2]) | set(apart[2]))
    print(f"\n{'':24}{'sweep':>10}{'one by one':>12}{'ratio':>8}")
    print(f"{'wall (s)':24}{sweep[0]:10.1f}{apart[0]:12.1f}{apart[0] / sweep[0]:8.2f}")
    print(f"{'CPU (s)':24}{sweep[1]:10.1f}{apart[1]:12.1f}{apart[1] / sweep[1]:8.2f}")
    print(f"{'tasks run':24}{sum(sweep[2].values()):10d}{sum(apart[2].values()):12d}")
    for stage in stages:
        shared = apart[2][stage] - sweep[2][stage]
        note = f"  ({shared} shared)" if shared > 0 else ""
        print(f"  {stage:22}{sweep[2][stage]:10d}{apart[2][stage]:12d}{note}")


if __name__ == "__main__":
    sys.exit(main())
