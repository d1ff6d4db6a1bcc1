"""The thesis's MNIST protocol through `pflpipe run`, seeds as members against per-seed execution.

    python benchmarks/protocol.py [--splits ds1,ds2,ds3] [--seeds 5] [--pool 70000]
                                  [--rounds R] [--epochs E] [--device cpu|cuda]
                                  [--compile auto|true|false] [--no-tracking] [--work DIR]
                                  [--write-docs | --profile]

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
federation, then picks every seed's teachers and trains all seeds' distillation grids as one
job). The engine settings are the only difference, so whatever the engine groups when
the switch is on is what is measured. Every task's wall seconds come from the CLI's task lines
(kfp.local's start to finish, process start and exit included); the grouped task's inner stages
from the times its outputs were written. Prints per split and stage the task seconds of both
runs, the run's wall and the ratio, the load average beside each run, and — when --rounds,
--epochs or --pool cut the protocol — the full protocol extrapolated, linearly: a task's fixed
cost (the median task of the grouped run that trained nothing: process start, imports, reading
the partition, writing results; when the grouped run started none, the per-seed run's shortest
training task) stays, its rest is multiplied by full rounds / rounds for a
round-bound task (warm start, select_teachers, personalize, and their parts of train_members),
by full epochs / epochs for the distillation grid, and by 70,000 / pool for every task but
collect_results and evaluate_fairness. Work done the same way in both runs is extrapolated once,
from the mean of its two measurements (the load's swings are not multiplied); tasks of the
grouped run that find their work done stay as measured. The wall grows by the extra task seconds
of the seeds loop over its 2 tasks at once, and by the grouped task's extra in full (it runs
alone).
`--write-docs` puts the tables into docs/performance.md's protocol block
(`python benchmarks/pages.py performance --only protocol` runs this and writes the block with
its command, commit and machine). `--profile`, instead
of the runs, splits the CPU seconds of the training train_members groups, in this process under
cProfile, seed by seed against grouped: training steps, evaluation, checkpoints, server steps.
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
BEGIN, END = "<!-- pages: protocol begin -->", "<!-- pages: protocol end -->"
#: A task line of `pflpipe run`'s output: ``  ✓ personalize[fedper] · seed 0   12.3 s``.
TASK_LINE = re.compile(r"^\s+\S\s(\S+(?: · seed \d+)?)\s+(\d+\.\d) s\b", re.M)
TASK_START = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - INFO - Executing task 'train-members'", re.M)
#: Tasks whose cost grows with the rounds; the distillation grid's grows with its epochs.
ROUND_BOUND = ("warm_start_fedavg", "select_teachers", "personalize[")
GRID = "distill_grid_search"
#: Tasks whose cost does not grow with the pool's samples (tables and tracking of every seed).
POOL_FREE = ("collect_results", "collect_members", "evaluate_fairness")


def write_pool(path: Path, samples: int) -> None:
    """The MNIST-sized pool: `samples` × 784 features, 10 learnable classes, at `path` (.npz)."""
    if path.exists():   # the same samples draw the same pool
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    clients = 70
    drawn = synthetic(clients, np.random.default_rng(0), iid=True, dimension=784, n_classes=10,
                      mean_samples=np.log(samples / clients - 49), sigma_samples=0.0,
                      min_samples=50)
    np.savez(path, x=drawn.x[:samples].astype(np.float32), y=drawn.y[:samples])


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
    """`pflpipe run --fresh` of `spec` in `out`: wall, each task's seconds, train_members' parts.

    What it measured is kept in ``out/run.json`` (the runs' files can then be deleted).
    """
    if (out / "run.json").exists():   # --work of an earlier invocation: tabulate it again
        return json.loads((out / "run.json").read_text())
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
    run = {"wall": wall, "load": (load_before, os.getloadavg()[0]), "tasks": tasks,
           "inner": members_parts(out / "results")}
    (out / "cli.txt").write_text(done.stdout)
    (out / "run.json").write_text(json.dumps(run, indent=1))
    return run


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
    """A task's cost beyond its work: the median task of the grouped run that trained nothing.

    When the grouped run started none (train_members trained every task: its seeds loop only
    collects), the shortest training task of the per-seed run: an upper bound of the fixed
    cost, so the per-seed run's extrapolation is a lower bound.
    """
    training = ("warm_start_fedavg ·", "train_local ·", "personalize[")
    idle = [s for t, s in runs[True]["tasks"] if t.startswith(training)]
    if idle:
        return statistics.median(idle)
    return min((s for t, s in runs[False]["tasks"] if t.startswith(training)), default=0.0)


def scale(name: str, seconds: float, count: int, fixed: float, factors: dict) -> float:
    """`seconds` of `count` tasks (or of a grouped part, count 0) at the full protocol."""
    stem = name.strip()
    factor = (factors["epochs"] if stem == GRID else
              factors["rounds"] if stem.startswith(ROUND_BOUND) else 1.0)
    factor *= 1.0 if stem in POOL_FREE else factors["pool"]
    rest = max(seconds - fixed * count, 0.0)
    return seconds + rest * (factor - 1.0)


def split_rows(split: str, runs: dict[bool, dict], factors: dict) -> tuple[list, dict]:
    """Table rows of one split: stage, per-seed s, grouped s, ratio, both extrapolated.

    A stage that does the same work in both runs (it is not grouped) is extrapolated once, from
    the mean of its two measurements, so the load's swings between the runs are not multiplied;
    a task of the grouped run that found its checkpoints trained stays at its measured seconds.
    """
    fixed = fixed_cost(runs)
    stages = {m: by_stage(runs[m]["tasks"]) for m in (False, True)}
    rows, extra = [], {False: 0.0, True: 0.0}
    inner = {part: (seconds, scale(part, seconds, 0, 0.0, factors))
             for part, seconds in runs[True]["inner"].items()}
    grouped = {part.strip() for part in inner}
    for name in dict.fromkeys([*stages[True], *stages[False]]):
        both = [stages[m][name] for m in (False, True) if name in stages[m]]
        mean = [sum(x) / len(both) for x in zip(*both, strict=True)]
        cells = []
        for m in (False, True):
            seconds, count = stages[m].get(name, (None, 0))
            if seconds is None:
                full = None
            elif name == "train_members" and inner:   # it runs alone: its extra in full
                full = seconds + sum(f - s for s, f in inner.values())
                extra[m] += full - seconds
            else:
                full = ((seconds if m else scale(name, seconds, count, fixed, factors))
                        if name in grouped else   # trained by train_members when grouped
                        seconds + scale(name, *mean, fixed, factors) - mean[0])
                extra[m] += (full - seconds) / 2   # the seeds loop runs 2 tasks at once
            cells += [seconds, full]
        rows.append((split, name, *cells))
        if name == "train_members":
            rows += [(split, part, None, None, s, f) for part, (s, f) in inner.items()]
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
        if name.startswith("  "):   # a part of train_members, the first with the task's start
            name = f"› {'start, ' if name == '  partition_data' else ''}{name.strip()}"
        row = [split, name, _s(apart), _s(together), _ratio(apart, together)]
        if cut:
            row += [_s(apart_full), _s(together_full), _ratio(apart_full, together_full)]
        cells.append(row)
    return markdown(header, cells, "ll" + "r" * (len(header) - 2))


def _s(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.1f}"


def _ratio(apart: float | None, together: float | None) -> str:
    return f"{apart / together:.2f}×" if apart and together else ""


#: What the profile splits a training stage's CPU into: (row, qualified function names).
PARTS = (("training steps", ("federation.py:_train",)),
         ("evaluation (forward passes, best-model tracking)", ("federation.py:_evaluate",)),
         ("checkpoints (every round's global model, the last state)",
          ("checkpoint.py:save", "checkpoint.py:keep")),
         ("server steps (aggregation, run by run)", ("server_step",)),
         ("data: reading the partition", ("files.py:load_tensors",)),
         ("results: tables, models, summary", ("results.py:write_results",)))


def profile(args, split: str, work: Path, pool: Path) -> list[str]:
    """CPU of the grouped training (train_members, in this process) against the seeds one by one.

    Both under cProfile in this process (no process start, imports already paid), split into
    `PARTS`; the stages train_members groups, at the benchmark's pool, rounds and seeds.
    """
    import cProfile
    import pstats

    from pflpipe.pipelines.cache import members_specs_json
    from pflpipe.spec import Spec, parse_spec
    from pflpipe.stages import partition_data, train_members

    data = protocol_spec(split, args, work, pool, True)
    data["engine"]["threads"] = 1   # as `pflpipe run` gives each task on 2 cores
    spec = parse_spec(yaml.safe_dump(data))
    specs = {k: Spec.model_validate(v) for k, v in json.loads(members_specs_json(spec)).items()}
    rows = {}
    for mode in ("per seed", "grouped"):
        out, profiler = work / "profile" / mode, cProfile.Profile(time.process_time)
        start = time.process_time()
        profiler.enable()
        if mode == "grouped":
            train_members.run(specs, out, resume="none")
        else:
            for seed in spec.experiment.seeds:
                partition_data.run(specs["partition_data"], seed, out / f"seed-{seed}/partition")
                _per_seed(specs, seed, out / f"seed-{seed}")
        profiler.disable()
        stats = pstats.Stats(profiler).stats
        rows[mode] = {"all": time.process_time() - start, **{
            part: sum(v[3] for (file, _, fn), v in stats.items()
                      if any(f"{Path(file).name}:{fn}".endswith(n) for n in names))
            for part, names in PARTS}}
    from pflpipe.markdown import table as markdown

    cells = [[part, f"{rows['per seed'][part]:.1f}", f"{rows['grouped'][part]:.1f}",
              _ratio(rows["per seed"][part], rows["grouped"][part])]
             for part in ["all", *(p for p, _ in PARTS)]]
    return markdown(["CPU s (in-process, cProfile)", "per seed", "grouped", "ratio"], cells,
                    "lrrr")


def _per_seed(specs: dict, seed: int, out: Path) -> None:
    """The tasks train_members groups, for one seed, as its own tasks run them."""
    from pflpipe.stages import (
        distill_grid_search,
        personalize,
        select_teachers,
        train_local,
        warm_start_fedavg,
    )

    part, checkpoints = out / "partition", out / "checkpoints"
    for name, spec in specs.items():
        if name == "warm_start_fedavg":
            warm_start_fedavg.run(spec, seed, part, checkpoints, out / name, resume="none")
        elif name == "select_teachers":
            select_teachers.run(spec, checkpoints, out / name)
        elif name == "distill_grid_search":
            distill_grid_search.run(spec, seed, part, checkpoints, out / "select_teachers",
                                    out / name)
        elif name == "train_local":
            train_local.run(spec, seed, part, out / name, resume="none")
        elif name.startswith("personalize["):
            personalize.run(spec, seed, name[12:-1], part, checkpoints, out / name,
                            resume="none")


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
    parser.add_argument("--profile", action="store_true", help="instead of the runs: the "
                        "grouped training's CPU against the seeds one by one, in-process, by part")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="pflpipe-protocol-"))).absolute()
    (work / "data").mkdir(parents=True, exist_ok=True)
    pool = work / "data" / f"pool-{args.pool}.npz"
    write_pool(pool, args.pool)
    if args.profile:
        for split in args.splits.split(","):
            load = os.getloadavg()[0]
            lines = profile(args, split, work / split, pool)
            print(f"{split}, load {load:.1f} → {os.getloadavg()[0]:.1f}:", *lines, sep="\n")
        return
    rows, totals = [], []
    for split in args.splits.split(","):
        full = yaml.safe_load((ROOT / "specs" / f"persfl-mnist-{split}.yaml").read_text())
        rounds, epochs = full["federation"]["rounds"], full["distillation"]["epochs"]
        factors = {"rounds": rounds / (args.rounds or rounds),
                   "epochs": epochs / (args.epochs or epochs), "pool": 70_000 / args.pool}
        runs = {}
        for members in (False, True):
            out = work / split / ("members" if members else "per-seed")
            runs[members] = run_once(protocol_spec(split, args, out, pool,
                                                   members), out)
            print(f"{split} {'grouped' if members else 'per seed'}: {runs[members]['wall']:.0f} s,"
                  f" load {runs[members]['load'][0]:.1f} → {runs[members]['load'][1]:.1f}",
                  flush=True)
        split_table, total = split_rows(split, runs, factors)
        rows += split_table
        totals.append((split, runs, total, factors))
    cut = bool(args.rounds or args.epochs or args.pool != 70_000)
    lines = [f"`{' '.join(sys.argv[1:]) or '(defaults)'}`: pool {args.pool}, {args.seeds} seeds, "
             f"rounds {args.rounds or 'the specs’'}, distillation epochs {args.epochs or 10}, "
             f"device {args.device}, compile {args.compile}, tracking "
             f"{'off' if args.no_tracking else 'on'}", ""]
    lines += table(rows, cut) + [""]
    for split, runs, total, factors in totals:
        loads = "; ".join(f"{'grouped' if m else 'per seed'} load {runs[m]['load'][0]:.1f} → "
                          f"{runs[m]['load'][1]:.1f}" for m in (False, True))
        lines.append(f"- {split}: {loads}; fixed cost of a task that trains nothing "
                     f"{total['fixed']:.1f} s; full-protocol factors: rounds "
                     f"×{factors['rounds']:g}, distillation epochs ×{factors['epochs']:g}, "
                     f"pool ×{factors['pool']:g}")
    print("\n".join(lines))
    print(f"runs kept in {work}")
    if args.write_docs:
        from pflpipe.markdown import replace_section

        replace_section(DOC, "\n".join([BEGIN, *lines, END]), BEGIN, END)


if __name__ == "__main__":
    main()
