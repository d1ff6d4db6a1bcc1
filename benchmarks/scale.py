"""The pipeline at 10, 100 and 1,000 clients: time, memory, bytes written and MLflow rows.

    python benchmarks/scale.py [--clients 10 100 1000] [--rounds 5] [--work DIR] [--no-tracking]
    python benchmarks/scale.py --shipped [--samples 20] [--work DIR]   # Flow's and pFedVEM's specs

For each number of clients, runs ``pflpipe run`` (a new results folder and a new MLflow sqlite
store) on the synthetic dataset (FedProx's Synthetic(0.5, 0.5), natural clients) with the
default MLP, FedAvg's warm start, local, FedPer and Ditto; ``client_fraction: 0.1`` and
``eval_clients: sampled`` (a cross-device setting: a round's cost grows with its sampled clients).
A ``sitecustomize`` hook on PYTHONPATH makes every Python process of the run record its CPU
seconds and its peak resident memory when it exits, and the run's processes are sampled every
50 ms for the memory they hold together. Prints, per size: each stage's wall (from kfp.local's
log; a stage run several times, e.g. personalize per entry, is summed) and CPU; the largest
process's peak memory and the most held at once (`held_at_once`: proportional set sizes summed,
so a page shared by processes, torch's libraries or a forked child's, counts once); the bytes
written under the results folder (kfp's
pipeline root, the published runs/ counted once where they are links, the checkpoints) and by MLflow
(its database, once sqlite has folded the write-ahead log the run left into it, and artifacts), next
to the clients' model weights (the per-client model files) and the partition's size; MLflow's runs
and metric rows. Then the growth from the second largest size to the largest as ratios, against the
ratio of clients (linear growth equals it). The machine is shared: the load average is printed.

``--shipped`` runs the shipped Flow and pFedVEM specs of CIFAR and Fashion-MNIST (`SHIPPED`;
the digits ones run as shipped) at a test size: their clients, model, partition and entries as
shipped, their data replaced by random samples of the same shape and classes (an ``arrays``
file, `--samples` per client), one seed, 2 rounds of 1 local epoch (1 epoch for local and
fine-tuning entries, a local entry added where the spec has none). For each it prints `pflpipe
validate`'s disk estimate of the test-sized spec, the bytes the run wrote and its wall.
"""

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

#: Loaded by every Python process of the run (PYTHONPATH); records its CPU and peak RSS at exit.
HOOK = '''
import os
if os.environ.get("PFLPIPE_SCALE_LOG"):
    import atexit, json, multiprocessing.process, resource, sys

    def _record(name=None):
        argv = sys.argv
        name = name or (argv[argv.index("--function_to_execute") + 1]
                        if "--function_to_execute" in argv else os.path.basename(argv[0]))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with open(os.environ["PFLPIPE_SCALE_LOG"], "a") as out:
            out.write(json.dumps({"name": name, "cpu": usage.ru_utime + usage.ru_stime,
                                  "rss_kb": usage.ru_maxrss}) + "\\n")

    atexit.register(_record)
    _bootstrap = multiprocessing.process.BaseProcess._bootstrap

    def _forked(self, *args, **kwargs):   # a forked child exits without atexit: record it here
        try:
            return _bootstrap(self, *args, **kwargs)
        finally:
            _record(os.path.basename(sys.argv[0]) + " (forked)")

    multiprocessing.process.BaseProcess._bootstrap = _forked
'''
SPEC = """\
experiment: {{name: scale-{n}, output_dir: results}}
dataset: {{name: synthetic}}
partition: {{strategy: natural, n_clients: {n}}}
federation: {{rounds: {rounds}, client_fraction: 0.1, eval_clients: sampled}}
personalization:
  - {{name: fedper, rounds: {rounds}}}
  - {{name: ditto, rounds: {rounds}}}
tracking: {{enabled: {tracking}, uri: "sqlite:///{work}/mlflow.db"}}
{engine}"""
TASK = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - \w+ - (?:Executing task '([\w-]+)'|"
                  r"Task '([\w-]+)' finished)", re.M)
MB = 1e6
#: The shipped specs of many clients whose data is not bundled (--shipped).
SHIPPED = ["flow-cifar10-dir01", "pfedvem-cifar10", "pfedvem-cifar100", "pfedvem-fmnist"]


def stage_walls(pipeline_log: Path) -> dict[str, float]:
    """Seconds of each stage in kfp.local's log, summed over its tasks (``personalize-2``...)."""
    started: dict[str, list[datetime]] = {}
    walls: dict[str, float] = {}
    for match in TASK.finditer(pipeline_log.read_text()):
        at = datetime.strptime(match.group(1), "%H:%M:%S.%f")
        if match.group(2):
            started.setdefault(match.group(2), []).append(at)
        else:
            name = match.group(3)
            stage = re.sub(r"-\d+$", "", name).replace("-", "_")
            walls[stage] = walls.get(stage, 0.0) + (at - started[name].pop(0)).total_seconds()
    return walls


def distinct_bytes(root: Path, seen: set) -> int:
    """Bytes of the files under `root` not counted before (a hard link counts once)."""
    total = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def partition_bytes(kfp_root: Path) -> int:
    """Bytes of the partition directory (the one kfp output holding a manifest and clients/)."""
    (manifest,) = [p for p in kfp_root.rglob("manifest.json") if (p.parent / "clients").is_dir()]
    return sum(p.stat().st_size for p in manifest.parent.rglob("*") if p.is_file())


def mlflow_counts(database: Path) -> dict[str, int]:
    """Runs and rows of an MLflow sqlite store."""
    if not database.is_file():
        return {"runs": 0, "metric rows": 0, "params": 0, "tags": 0}
    with sqlite3.connect(database) as db:
        return {"runs": db.execute("select count(*) from runs").fetchone()[0],
                "metric rows": db.execute("select count(*) from metrics").fetchone()[0],
                "params": db.execute("select count(*) from params").fetchone()[0],
                "tags": db.execute("select count(*) from tags").fetchone()[0]}


def run_size(n: int, rounds: int, work: Path, tracking: bool, parallel_tasks: int = 0) -> dict:
    """Run the pipeline at `n` clients in `work`; return what it measured."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "hook").mkdir(exist_ok=True)
    (work / "hook" / "sitecustomize.py").write_text(HOOK)
    engine = f"engine: {{parallel_tasks: {parallel_tasks}}}\n" if parallel_tasks else ""
    (work / "spec.yaml").write_text(SPEC.format(n=n, rounds=rounds, work=work, engine=engine,
                                                tracking=str(tracking).lower()))
    records = work / "processes.jsonl"
    records.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | {
        "PFLPIPE_SCALE_LOG": str(records),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(work / "hook"),
                                                    os.environ.get("PYTHONPATH")]))}
    command = [str(Path(sys.executable).with_name("pflpipe")), "run", "spec.yaml", "--fresh"]
    before, start = os.getloadavg()[0], time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, env=env, cwd=work, stdout=out, stderr=err, text=True)
        held = held_at_once(process)
        wall = time.monotonic() - start
        if process.returncode:
            err.seek(0)
            sys.exit(f"{n} clients: pflpipe run failed (exit {process.returncode}):\n"
                     f"{err.read()}")
    processes = [json.loads(line) for line in records.read_text().splitlines()]
    cpu: dict[str, float] = {}
    for process in processes:
        cpu[process["name"]] = cpu.get(process["name"], 0.0) + process["cpu"]
    rss = sorted((p["rss_kb"] * 1e3 for p in processes), reverse=True)
    results = work / "results"
    # the write-ahead log the last writer left: sqlite folds it into the database on the next
    # open (counting rows here), after which the store holds what it keeps
    wal = sum(p.stat().st_size for p in work.glob("mlflow.db-wal"))
    counts = mlflow_counts(work / "mlflow.db")
    seen: set = set()
    written = {"kfp root": distinct_bytes(results / "kfp", seen),
               "runs/ (beyond links)": distinct_bytes(results / "runs", seen),
               "checkpoints": distinct_bytes(results / "checkpoints", seen),
               "logs": distinct_bytes(results / "logs", seen),
               "MLflow": (distinct_bytes(work / "mlartifacts", seen)
                          + sum(p.stat().st_size for p in work.glob("mlflow.db*")))}
    models = [p for p in (results / "latest").rglob("client_*.pt") if p.parent.name == "models"]
    return {"n": n, "wall": wall, "cpu": sum(cpu.values()), "load": (before, os.getloadavg()[0]),
            "stages": stage_walls(results / "logs" / "pipeline.log"), "stage_cpu": cpu,
            "rss": rss[0], "held": held, "written": written,
            "weights": sum(p.stat().st_size for p in models),
            "client_models": len(models), "partition": partition_bytes(results / "kfp"),
            "mlflow": counts, "wal": wal}


def held_at_once(process: subprocess.Popen, every: float = 0.05) -> dict:
    """Sample the memory `process` and its descendants hold together until it exits.

    Every `every` seconds, the sum of each process's proportional set size (its private pages
    plus its share of those it shares: torch's libraries mapped by every task, a forked child's
    pages still shared with its parent; what the machine holds once) and of its resident set
    size (a shared page once per process). Returns the largest PSS sum, the RSS sum at the same
    moment, each process then alive as (name, PSS), and the number of samples.
    """
    most = {"pss": 0, "rss": 0, "processes": [], "samples": 0}
    while process.poll() is None:
        alive = _tree(process.pid)
        pss = rss = 0
        names = []
        for pid in alive:
            sizes = _sizes(pid)
            if sizes is None:
                continue
            pss, rss = pss + sizes[0], rss + sizes[1]
            names.append((_task_name(pid), sizes[0]))
        most["samples"] += 1
        if pss > most["pss"]:
            most |= {"pss": pss, "rss": rss, "processes": names}
        time.sleep(every)
    return most


def _tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _sizes(pid: int) -> tuple[int, int] | None:
    """(PSS, RSS) of `pid` in bytes, from /proc/PID/smaps_rollup; None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return None
    sizes = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines[1:]}
    return (sizes["Pss"], sizes["Rss"]) if "Pss" in sizes else None


def _task_name(pid: int) -> str:
    """A process's stage (kfp's --function_to_execute), else its program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return "?"
    if "--function_to_execute" in argv:
        return argv[argv.index("--function_to_execute") + 1]
    return os.path.basename(argv[1] if len(argv) > 1 and argv[0].endswith("python") else argv[0])


def report(m: dict) -> None:
    """Print one size's measurements."""
    n = m["n"]
    print(f"\n== {n} clients: wall {m['wall']:.1f} s, CPU {m['cpu']:.1f} s "
          f"(load {m['load'][0]:.1f} before, {m['load'][1]:.1f} after)")
    print(f"  {'stage':22s} {'wall s':>8s} {'CPU s':>8s}")
    for stage, wall in m["stages"].items():
        print(f"  {stage:22s} {wall:8.1f} {m['stage_cpu'].get(stage, float('nan')):8.1f}")
    print(f"  {'CLI (pflpipe)':22s} {'':8s} {m['stage_cpu'].get('pflpipe', float('nan')):8.1f}")
    held = m["held"]
    print(f"  peak memory: largest process {m['rss'] / MB:.0f} MB (its peak RSS)")
    print(f"  held at once, sampled every 50 ms ({held['samples']} samples): at most "
          f"{held['pss'] / MB:.0f} MB (PSS summed: a shared page once; RSS summed then "
          f"{held['rss'] / MB:.0f} MB), in " + ", ".join(
              f"{name} {size / MB:.0f}" for name, size in sorted(
                  held["processes"], key=lambda item: -item[1]) if size >= MB))
    total = sum(m["written"].values())
    budget = 3 * m["weights"] + m["partition"]
    print("  bytes written: " + ", ".join(f"{k} {v / MB:.1f} MB" for k, v in m["written"].items())
          + f"; all {total / MB:.1f} MB (MLflow's after sqlite folded the {m['wal'] / MB:.1f} MB"
          " write-ahead log the run left)")
    print(f"  clients' model weights {m['weights'] / MB:.1f} MB ({m['client_models']} files, "
          f"{m['weights'] / max(m['client_models'], 1) / 1e3:.1f} kB per client and model), "
          f"partition {m['partition'] / MB:.1f} MB; written / (3 x weights + partition) = "
          f"{total / budget:.2f}")
    print("  MLflow: " + ", ".join(f"{k} {v}" for k, v in m["mlflow"].items()))


def growth(small: dict, large: dict) -> None:
    """Print the ratios from `small` to `large` next to the ratio of clients."""
    ratio = large["n"] / small["n"]

    def row(name: str, a: float, b: float) -> None:
        print(f"  {name:30s} {a:10.1f} {b:10.1f} {b / a if a else float('nan'):8.2f}")

    print(f"\n== growth from {small['n']} to {large['n']} clients (x{ratio:g}; linear = "
          f"{ratio:g})")
    print(f"  {'':30s} {small['n']:>10d} {large['n']:>10d} {'ratio':>8s}")
    row("wall s", small["wall"], large["wall"])
    row("CPU s", small["cpu"], large["cpu"])
    for stage in large["stages"]:
        row(f"{stage} wall s", small["stages"].get(stage, 0), large["stages"][stage])
    row("peak memory MB", small["rss"] / MB, large["rss"] / MB)
    row("bytes written MB", sum(small["written"].values()) / MB,
        sum(large["written"].values()) / MB)
    row("kB per client and model", small["weights"] / max(small["client_models"], 1) / 1e3,
        large["weights"] / max(large["client_models"], 1) / 1e3)
    for key in ("runs", "metric rows"):
        row(f"MLflow {key}", small["mlflow"][key], large["mlflow"][key])


def shipped_variant(path: Path, work: Path, samples: int) -> Path:
    """Write the test-sized variant of a shipped spec (and its random data) into `work`."""
    import numpy as np
    import yaml

    from pflpipe.spec.dataset import n_classes_of
    from pflpipe.spec.loader import read_spec
    from pflpipe.spec.spec import IMAGE_SHAPES

    spec = read_spec(path)
    data = yaml.safe_load(path.read_text())
    shape, classes = IMAGE_SHAPES[spec.dataset.name], n_classes_of(spec.dataset)
    n = spec.partition.n_clients * samples
    generator = np.random.default_rng(0)
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "data.npz", x=generator.normal(size=(n, *shape)).astype(np.float32),
             y=np.arange(n) % classes)
    data["experiment"] |= {"seeds": [0], "output_dir": "results"}
    data["dataset"] = {"name": "arrays", "root": str(work), "path": "data.npz",
                       "n_classes": classes}
    data["partition"].pop("samples_per_client", None)
    data["partition"]["min_samples"] = 3   # a few random samples per client (the least allowed)
    data["federation"] |= {"rounds": 2, "local_epochs": 1}
    data["federation"].pop("full_eval_every", None)
    for entry in data.get("personalization", []):
        for key in ("rounds", "local_epochs", "personal_epochs", "head_epochs"):
            entry.pop(key, None)
        if entry["name"] in ("local", "fedavg_ft"):
            entry["epochs"] = 1
    if not any(entry["name"] == "local" for entry in data.get("personalization", [])):
        data["personalization"].append({"name": "local", "epochs": 1})   # the baseline's
    data["tracking"] = {"uri": f"sqlite:///{work}/mlflow.db"}
    data.pop("resources", None)
    data.get("engine", {}).pop("device", None)
    (work / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return work / "spec.yaml"


def variant_estimate(path: Path, variant: Path, samples: int):
    """`pflpipe.disk.estimate` of a test-sized variant: the shipped dataset's shape, its samples."""
    import math

    import yaml

    from pflpipe.disk import PARTITION_CLIENT, SAMPLE_OVERHEAD, DiskEstimate, estimate
    from pflpipe.spec.loader import parse_spec
    from pflpipe.spec.spec import IMAGE_SHAPES

    data = yaml.safe_load(variant.read_text())
    data["dataset"] = yaml.safe_load(path.read_text())["dataset"]
    need = estimate(parse_spec(yaml.safe_dump(data)))
    shape = IMAGE_SHAPES[data["dataset"]["name"]]
    clients = data["partition"]["n_clients"]
    partition = clients * (samples * (math.prod(shape) * 4 + SAMPLE_OVERHEAD) + PARTITION_CLIENT)
    return DiskEstimate(partition, need.results, need.checkpoints, need.tracking, need.fixed)


def shipped(work: Path, samples: int, names: list[str]) -> None:
    """Run each shipped Flow and pFedVEM spec's test-sized variant; print estimate and bytes."""
    root = Path(__file__).resolve().parent.parent / "specs"
    pflpipe = str(Path(sys.executable).with_name("pflpipe"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    for name in names:
        path = root / f"{name}.yaml"
        folder = work / path.stem
        spec = shipped_variant(path, folder, samples)
        checked = subprocess.run([pflpipe, "validate", str(path)], env=env, capture_output=True,
                                 text=True)
        full = [line.split("disk", 1)[1].strip() for line in checked.stdout.splitlines()
                if line.strip().startswith("disk ")]
        need = variant_estimate(path, spec, samples)
        start, before = time.monotonic(), os.getloadavg()[0]
        done = subprocess.run([pflpipe, "run", "spec.yaml", "--fresh"], cwd=folder, env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - start
        seen: set = set()
        written = (distinct_bytes(folder / "results", seen)
                   + distinct_bytes(folder / "mlartifacts", seen)
                   + sum(p.stat().st_size for p in folder.glob("mlflow.db*")))
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        print(f"{path.name} as shipped: {full[0] if full else 'no estimate'}")
        print(f"  test size: {status} in {wall:.0f} s (load {before:.1f}); estimated "
              f"{need.describe()}; written {written / MB:.1f} MB ({written / need.total:.2f}x)")
        if done.returncode:
            print(done.stderr[-2000:])


def main() -> int:
    """Run every size, print each, then the growth between the two largest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, help="where the runs go (default: a temporary dir)")
    parser.add_argument("--no-tracking", action="store_true", help="run with tracking off")
    parser.add_argument("--parallel-tasks", type=int, default=0, metavar="P",
                        help="engine.parallel_tasks: at most P tasks at once (default: "
                             "kfp.local's own, two loop iterations)")
    parser.add_argument("--shipped", action="store_true",
                        help="run the shipped Flow and pFedVEM specs at a test size instead")
    parser.add_argument("--samples", type=int, default=20,
                        help="--shipped: random samples per client")
    parser.add_argument("--specs", nargs="+", default=SHIPPED, help="--shipped: which specs")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="pflpipe-scale-"))).absolute()
    if args.shipped:
        shipped(work, args.samples, args.specs)
        return 0
    print(f"scale: {work}; {args.rounds} rounds, tracking "
          f"{'off' if args.no_tracking else 'on'}; {os.cpu_count()} CPUs")
    measured = []
    for n in args.clients:
        measured.append(run_size(n, args.rounds, work / f"clients-{n}", not args.no_tracking,
                                 args.parallel_tasks))
        report(measured[-1])
    if len(measured) > 1:
        growth(measured[-2], measured[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
