"""The thesis's MNIST protocol through `pflpipe run`, seeds as members against per-seed execution.

    python benchmarks/protocol.py [--splits ds1,ds2,ds3] [--seeds 5] [--pool 70000]
                                  [--rounds R] [--epochs E] [--device cpu|cuda]
                                  [--compile auto|true|false] [--no-tracking] [--write-docs]

The defaults are the protocol of issue 31: an MNIST-sized synthetic pool (70,000 samples of 784
features, labels learnable by a linear model: the Synthetic-IID recipe of
`pflpipe.data.synthetic`, one shared W, b, x ~ N(0, Σ) with Σ_jj = j^-1.2, y = argmax(Wᵀx + b)),
written once as an `arrays` dataset, split as specs/persfl-mnist-ds{1,2,3}.yaml split MNIST
(10 clients, 60/20/20; ds1 4 classes per client, ds2 Dirichlet 0.9, ds3 log-normal sizes), with
those specs' settings: 5 seeds; FedAvg 100/25/100 rounds (the thesis's Table 6.7), the local
baseline (20 epochs), PersFL's 5 λ × 6 T grid (10 distillation epochs), FedPer, pFedMe and
Per-FedAvg (the entries train federation.rounds); tracking on (an MLflow sqlite store).

Each split runs twice, one after the other, with `pflpipe run --fresh`: per seed
(`engine.seeds_as_members: false`, today's default) and grouped (`true`: one `train_members` task
trains every seed's warm start, local baseline and untuned entries as members of one
federation). The engine settings are the only difference, so whatever the engine groups when
the switch is on is what is measured. Every task's wall seconds come from the CLI's task lines
(kfp.local's start to finish, process start and exit included); the grouped task's inner stages
from the times its outputs were written. Prints per split and stage the task seconds of both
runs, the run's wall and the ratio, the load average beside each run, and — when --rounds or
--epochs cut the protocol — the full protocol extrapolated: a round-bound task (warm start,
select_teachers, personalize, and their part of train_members) as its fixed cost (a task of
that run that trained nothing) plus its measured rest × full rounds / rounds; the distillation
grid likewise × full epochs / epochs; the wall grows by the extra task seconds of the seeds loop
over its 2 tasks at once, and by the grouped task's extra in full. `--write-docs` puts the
tables into docs/performance.md's "Protocol" section.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

from pflpipe.data.synthetic import synthetic

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- protocol.py: begin -->", "<!-- protocol.py: end -->"
#: A task line of `pflpipe run`'s output: ``  ✓ personalize[fedper] · seed 0   12.3 s``.
TASK_LINE = re.compile(r"^\s+\S\s(\S+(?: · seed \d+)?)\s+(\d+\.\d) s\b", re.M)
TASK_START = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - INFO - Executing task 'train-members'", re.M)
#: Tasks whose cost grows with the rounds; the distillation grid's grows with its epochs.
ROUND_BOUND = ("warm_start_fedavg", "select_teachers", "personalize[")
GRID = "distill_grid_search"


def write_pool(root: Path, samples: int) -> None:
    """The MNIST-sized pool: `samples` × 784 features, 10 learnable classes, as pool.npz."""
    clients = 70
    drawn = synthetic(clients, np.random.default_rng(0), iid=True, dimension=784, n_classes=10,
                      mean_samples=np.log(samples / clients - 49), sigma_samples=0.0,
                      min_samples=50)
    np.savez(root / "pool.npz", x=drawn.x[:samples].astype(np.float32), y=drawn.y[:samples])


def protocol_spec(split: str, args, out: Path, pool: Path, members: bool) -> dict:
    """The split's thesis spec on the synthetic pool, cut as `args` says, in one engine mode."""
    spec = yaml.safe_load((ROOT / "specs" / f"persfl-mnist-{split}.yaml").read_text())
    spec["experiment"].update(name=f"protocol-{split}-{'members' if members else 'per-seed'}",
                              seeds=list(range(args.seeds)), output_dir=str(out / "results"))
    spec["dataset"] = {"name": "arrays", "root": str(pool.parent), "path": pool.name}
    if args.rounds:
        spec["federation"]["rounds"] = args.rounds
    if args.epochs:
        spec["distillation"]["epochs"] = args.epochs
    spec["engine"] = {"device": args.device, "seeds_as_members": members,
                      "compile": json.loads(args.compile) if args.compile != "auto" else "auto"}
    spec["tracking"] = ({"enabled": False} if args.no_tracking else
                        {"uri": f"sqlite:///{out / 'mlflow.db'}"})
    return spec


def run_once(spec: dict, out: Path) -> dict:
    """`pflpipe run --fresh` of `spec` in `out`: wall, each task's seconds, train_members' parts."""
    if (out / "run.json").exists():   # --work of an earlier invocation: tabulate it again
        return {**json.loads((out / "run.json").read_text()),
                "inner": members_parts(out / "results")}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    load_before, start = os.getloadavg()[0], time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "pflpipe"), "run", str(path),
                           "--fresh"], capture_output=True, text=True, cwd=out,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "240"})
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"pflpipe run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    tasks = [(title, float(s)) for title, s in TASK_LINE.findall(done.stdout)]
    run = {"wall": wall, "load": (load_before, os.getloadavg()[0]), "tasks": tasks}
    (out / "cli.txt").write_text(done.stdout)
    (out / "run.json").write_text(json.dumps(run, indent=1))
    return {**run, "inner": members_parts(out / "results")}


def members_parts(results: Path) -> dict[str, float]:
    """Seconds of each stage inside the train_members task (from its outputs' times), if any."""
    log = (results / "logs" / "pipeline.log")
    match = TASK_START.search(log.read_text()) if log.exists() else None
    if not match:
        return {}
    clock = datetime.strptime(match.group(1), "%H:%M:%S.%f")
    day = datetime.fromtimestamp(log.stat().st_mtime)
    begun = day.replace(hour=clock.hour, minute=clock.minute, second=clock.second,
                        microsecond=clock.microsecond).timestamp()
    task = next((results / "kfp").glob("**/train-members"), None)
    ends: dict[str, float] = {}
    for path in task.glob("**/seed-*/*/*") if task else ():
        name = "partition_data" if path.parent.name == "partition" else path.parent.name
        ends[name] = max(ends.get(name, 0.0), path.stat().st_mtime)
    parts, last = {}, begun
    for name, end in sorted(ends.items(), key=lambda item: item[1]):
        if name != "checkpoints":
            parts[f"  {name}"], last = end - last, end
    return parts


def by_stage(tasks: list[tuple[str, float]]) -> dict[str, tuple[float, int]]:
    """Task seconds summed per stage (the title without its seed), and the number of tasks."""
    stages: dict[str, tuple[float, int]] = {}
    for title, seconds in tasks:
        name = title.split(" · ")[0]
        total, count = stages.get(name, (0.0, 0))
        stages[name] = (total + seconds, count + 1)
    return stages


def fixed_cost(runs: dict[bool, dict]) -> float:
    """A task's cost beyond its work: the median task of the grouped run that trained nothing."""
    grouped = runs[True]["tasks"]
    idle = [s for t, s in grouped if t.startswith(("warm_start_fedavg ·", "train_local ·",
                                                   "personalize["))]
    return statistics.median(idle) if idle else 0.0


def scale(name: str, seconds: float, count: int, fixed: float, factors: dict) -> float:
    """`seconds` of `count` tasks (or of a grouped part, count 0) at the full protocol."""
    stem = name.strip()
    factor = (factors["epochs"] if stem == GRID else
              factors["rounds"] if stem.startswith(ROUND_BOUND) else 1.0)
    rest = max(seconds - fixed * count, 0.0)
    return seconds + rest * (factor - 1.0)


def split_rows(split: str, runs: dict[bool, dict], factors: dict) -> tuple[list, dict]:
    """Table rows of one split: stage, per-seed s, grouped s, ratio, both extrapolated."""
    fixed = fixed_cost(runs)
    stages = {m: by_stage(runs[m]["tasks"]) for m in (False, True)}
    rows, extra = [], {False: 0.0, True: 0.0}
    names = list(dict.fromkeys([*stages[True], *stages[False]]))
    for name in names:
        cells = []
        for m in (False, True):
            seconds, count = stages[m].get(name, (None, 0))
            full = None if seconds is None else scale(name, seconds, count, fixed, factors)
            if seconds is not None and name != "train_members":
                extra[m] += (full - seconds) / 2   # the seeds loop runs 2 tasks at once
            cells += [seconds, full]
        rows.append((split, name, *cells))
        if name == "train_members":
            for part, seconds in runs[True]["inner"].items():
                full = scale(part, seconds, 0, 0.0, factors)
                extra[True] += full - seconds
                rows.append((split, part, None, None, seconds, full))
    walls = [runs[m]["wall"] for m in (False, True)]
    rows.append((split, "**pflpipe run (wall)**", walls[0], walls[0] + extra[False],
                 walls[1], walls[1] + extra[True]))
    return rows, {"walls": walls, "full": [walls[0] + extra[False], walls[1] + extra[True]],
                  "fixed": fixed}


def table(rows: list, cut: bool) -> list[str]:
    """The Markdown table of every split's rows."""
    from pflpipe.markdown import table as markdown

    header = ["split", "stage (task s, all seeds)", "per seed s", "grouped s", "ratio"]
    if cut:
        header += ["per seed, full s", "grouped, full s", "full ratio"]
    cells = []
    for split, name, apart, apart_full, together, together_full in rows:
        row = [split, name, _s(apart), _s(together), _ratio(apart, together)]
        if cut:
            row += [_s(apart_full), _s(together_full), _ratio(apart_full, together_full)]
        cells.append(row)
    return markdown(header, cells, "ll" + "r" * (len(header) - 2))


def _s(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.1f}"


def _ratio(apart: float | None, together: float | None) -> str:
    return f"{apart / together:.2f}×" if apart and together else ""


def main() -> None:
    """Run each split both ways; print the table (and write it into the docs)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", default="ds1,ds2,ds3")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--pool", type=int, default=70_000, help="samples in the pool")
    parser.add_argument("--rounds", type=int, help="FedAvg's and the entries' rounds "
                        "(default: each split's spec, 100/25/100)")
    parser.add_argument("--epochs", type=int, help="distillation epochs (default: the spec's 10)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--compile", default="auto", choices=["auto", "true", "false"])
    parser.add_argument("--no-tracking", action="store_true")
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temporary "
                        "dir); a run already there (its run.json) is tabulated, not rerun")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="pflpipe-protocol-"))).absolute()
    (work / "data").mkdir(parents=True, exist_ok=True)
    write_pool(work / "data", args.pool)
    rows, totals = [], []
    for split in args.splits.split(","):
        full_rounds = yaml.safe_load((ROOT / "specs" / f"persfl-mnist-{split}.yaml").read_text())[
            "federation"]["rounds"]
        factors = {"rounds": full_rounds / (args.rounds or full_rounds),
                   "epochs": 10 / (args.epochs or 10)}
        runs = {}
        for members in (False, True):
            out = work / split / ("members" if members else "per-seed")
            runs[members] = run_once(protocol_spec(split, args, out, work / "data" / "pool.npz",
                                                   members), out)
            print(f"{split} {'grouped' if members else 'per seed'}: {runs[members]['wall']:.0f} s,"
                  f" load {runs[members]['load'][0]:.1f} → {runs[members]['load'][1]:.1f}",
                  flush=True)
        split_table, total = split_rows(split, runs, factors)
        rows += split_table
        totals.append((split, runs, total, factors))
    cut = bool(args.rounds or args.epochs)
    lines = [f"`{' '.join(sys.argv[1:]) or '(defaults)'}`: pool {args.pool}, {args.seeds} seeds, "
             f"rounds {args.rounds or 'the specs’'}, distillation epochs {args.epochs or 10}, "
             f"device {args.device}, compile {args.compile}, tracking "
             f"{'off' if args.no_tracking else 'on'}; {datetime.now():%Y-%m-%d %H:%M}", ""]
    lines += table(rows, cut) + [""]
    for split, runs, total, factors in totals:
        loads = "; ".join(f"{'grouped' if m else 'per seed'} load {runs[m]['load'][0]:.1f} → "
                          f"{runs[m]['load'][1]:.1f}" for m in (False, True))
        lines.append(f"- {split}: {loads}; fixed cost of a task that trains nothing "
                     f"{total['fixed']:.1f} s; full-protocol factors: rounds "
                     f"×{factors['rounds']:g}, distillation epochs ×{factors['epochs']:g}")
    print("\n".join(lines))
    print(f"runs kept in {work}")
    if args.write_docs:
        from pflpipe.markdown import replace_section

        replace_section(DOC, "\n".join([BEGIN, *lines, END]), BEGIN, END)


if __name__ == "__main__":
    main()
