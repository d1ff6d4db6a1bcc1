"""Generalized and personalized accuracy of Flow and its baselines (Flow's Tables 5 and 7).

Runs specs/flow-digits.yaml (digits, 100 clients, Dirichlet(0.1), 10 clients per round) stage by
stage in-process, exactly as the pipeline chains them: partition_data → warm_start_fedavg →
train_local → personalize (one entry per algorithm), then evaluates the results tables with
`pflpipe.metrics.generalization` and prints one Markdown table: per model GA, PA and the % of
clients whose PA beats GA, mean ± std over seeds, PA's 95 % interval (over the seeds, or a
bootstrap over the clients of one seed); Flow's PA under soft routing (Table 8); and
the engine's compute from results.csv (local steps and samples, summed over clients).
For every Flow entry it also prints what the router did: per routed layer, the mean π_g and the
share of test instances that hard routing sends to the global copy (each client's saved
best-validation model on its own test split, pooled over clients), mean over seeds.

    python benchmarks/flow_digits.py                      # seed 0, the spec as it is
    python benchmarks/flow_digits.py --seeds 0 1 2 --set federation.rounds=500 --only flow

`--set a.b=v` overrides a spec value (YAML-parsed); `--only` keeps some personalization entries;
`--workdir` keeps the stages' outputs (a rerun resumes from their checkpoints); `--threads`
sets torch's CPU threads (default 1).
"""

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
import yaml
from results_tables import cells_of, interval  # a sibling script (benchmarks/ is on sys.path)

from pflpipe import layout
from pflpipe.algorithms import build
from pflpipe.algorithms.flow import routing_shares
from pflpipe.data.files import load_tensors
from pflpipe.engine.trainer import Context
from pflpipe.metrics import table_from_records
from pflpipe.metrics.generalization import compare
from pflpipe.spec import Spec
from pflpipe.stages import partition_data, personalize, train_local, warm_start_fedavg
from pflpipe.training import csv_tables, stage_setup

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "specs" / "flow-digits.yaml"


def load(path: Path, overrides: list[str], only: list[str] | None, root: Path) -> Spec:
    """The spec at `path` with `--set` overrides, no tracking, results under `root`."""
    data = yaml.safe_load(path.read_text())
    for item in overrides:
        path, value = item.split("=", 1)
        node, *keys = path.split(".")
        target = data.setdefault(node, {})
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1] if keys else node] = yaml.safe_load(value)
    if only:
        data["personalization"] = [e for e in data["personalization"] if e["name"] in only]
    data["tracking"] = {"enabled": False}
    data["experiment"]["output_dir"] = str(root / "results")
    data["storage"] = {"kind": "local", "path": str(root / "store")}
    return Spec.model_validate(data)


def run_seed(spec: Spec, seed: int, root: Path, seconds: dict[str, float]) -> list[dict]:
    """Every stage of one seed; return the rows of every results.csv."""
    out = root / f"seed-{seed}"
    partition, checkpoints = out / "partition", out / "checkpoints"

    def timed(name, fn):
        start = time.perf_counter()
        fn()
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start

    timed("partition_data", lambda: partition_data.run(spec, seed, partition))
    timed("fedavg", lambda: warm_start_fedavg.run(spec, seed, partition, checkpoints,
                                                  out / "fedavg"))
    timed("local", lambda: train_local.run(spec, seed, partition, out / "local"))
    for entry in spec.personalization:
        label = entry.display_name
        timed(label, lambda label=label: personalize.run(spec, seed, label, partition,
                                                         checkpoints, out / label))
    return [row for directory in sorted(out.iterdir()) if (directory / "results.csv").is_file()
            for row in csv_tables.read_csv(directory / "results.csv")]


def routing(spec: Spec, seed: int, root: Path, split: str) -> dict[str, dict[str, list[float]]]:
    """Per Flow entry: mean π_g and share routed to global per layer, over all clients' `split`
    instances."""
    out = root / f"seed-{seed}"
    s = stage_setup.setup(spec, seed, out / "partition")
    shares = {}
    for entry in spec.personalization:
        if entry.name != "flow":
            continue
        algorithm = build(entry, head=s.head, federation=spec.federation)
        test = getattr(s.data, split)
        with torch.random.fork_rng(devices=[]):
            router = algorithm.modules(tuple(test.x.shape[1:]), 10, model=s.ctx.model)
        ctx = Context(s.ctx.model, s.ctx.task, router)
        pis = []
        for client in range(test.n_clients):
            name = f"{layout.client_file(client)}.pt"
            flat = load_tensors(out / entry.display_name / "models" / name, "a client model")
            model = {"router": {k.split("/", 1)[1]: v for k, v in flat.items()
                                if k.startswith("router/")}}
            x, _ = test.client(client)
            with torch.no_grad():
                pis.append(algorithm.route(model["router"], x, ctx))
        pooled = routing_shares(torch.cat(pis))
        shares[entry.display_name] = {k: v.tolist() for k, v in pooled.items()}
    return shares


def routing_table(per_seed: list[dict]) -> str:
    """Mean over seeds of the per-layer mean π_g and share routed to global, in percent."""
    lines = ["| entry | mean π_g per layer % | routed to global per layer % |", "|---|---|---|"]
    for label in per_seed[0]:
        cells = []
        for key in ("pi_global", "to_global"):
            layers = zip(*(seed[label][key] for seed in per_seed), strict=True)
            cells.append(" / ".join(f"{100 * sum(v) / len(v):.1f}" for v in layers))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def table(rows: list[dict], selection: str) -> str:
    """GA, PA, PA > GA (and soft-routing PA) per model, in percent, mean ± std over seeds."""
    scoped = [r for r in rows if r["scope"] in ("", "global")]
    comparisons = compare(table_from_records(scoped), selection=selection)["test"]
    soft = [{**r, "scope": ""} for r in rows if r["scope"] == "soft"]
    soft_pa = compare(table_from_records(soft), selection=selection)["test"] if soft else {}

    def cell(mean, std, scale=100.0):
        if mean is None:
            return "—"
        return f"{scale * mean:.2f}" + ("" if std is None else f" ± {scale * std:.2f}")

    spent, cells = compute(rows, selection), cells_of(rows, selection)
    lines = ["| model | GA % | PA % | PA 95 % CI | PA > GA (% clients) | PA, soft routing % | "
             "local steps | samples (fwd+bwd) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model, c in comparisons.items():
        pa_soft = soft_pa.get(model)
        steps, samples = spent.get(model, ("—", "—"))
        pa_interval = interval(cells.get(model)) if c.mean["PA"] is not None else "—"
        lines.append(f"| {model} | {cell(c.mean['GA'], c.std['GA'])} | "
                     f"{cell(c.mean['PA'], c.std['PA'])} | {pa_interval} | "
                     f"{cell(c.mean['beats_global'], c.std['beats_global'], 1.0)} | "
                     f"{cell(pa_soft.mean['PA'], pa_soft.std['PA']) if pa_soft else '—'} | "
                     f"{steps} | {samples} |")
    return "\n".join(lines)


def compute(rows: list[dict], selection: str) -> dict[str, tuple[str, str]]:
    """Per model: local steps and samples of results.csv, summed over clients, mean over seeds.

    Counted by the engine during training (its test rows of `selection` carry each client's
    totals over the rounds); a model whose rows carry none is left out.
    """
    sums: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if (row["split"] != "test" or row["scope"] or row["selection"] != selection
                or row.get("steps") in (None, "")):
            continue
        seeds = sums.setdefault(row["model"], {})
        totals = seeds.setdefault(row["seed"], [0.0, 0.0])
        totals[0] += float(row["steps"])
        totals[1] += float(row["samples"])
    return {model: tuple(f"{sum(t[i] for t in seeds.values()) / len(seeds):,.0f}"
                         for i in (0, 1)) for model, seeds in sums.items()}


def main() -> None:
    """Run the seeds; print the tables for both selections and the time per stage."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--only", nargs="+")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--spec", type=Path, default=SPEC, help="the spec (default: %(default)s)")
    parser.add_argument("--routing-split", default="test", choices=("val", "test"),
                        help="the instances the routing shares are measured on")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="flow-digits-"))
    spec = load(args.spec, args.overrides, args.only, root)
    seconds: dict[str, float] = {}
    rows = [row for seed in args.seeds for row in run_seed(spec, seed, root, seconds)]
    fed = spec.federation
    print(f"digits, {spec.partition.n_clients} clients, {spec.partition.strategy} "
          f"α = {spec.partition.alpha}, {fed.rounds} rounds × {fed.local_epochs} local epochs, "
          f"{math.ceil(fed.client_fraction * spec.partition.n_clients)} clients per round, "
          f"lr {fed.lr}, seeds {args.seeds}; overrides {args.overrides or 'none'}")
    for selection in ("last_round", "best_val"):
        print(f"\nselection {selection}:\n{table(rows, selection)}")
    per_seed = [routing(spec, seed, root, args.routing_split) for seed in args.seeds]
    if per_seed[0]:
        print(f"\nrouting (best-val models, {args.routing_split} instances):\n"
              f"{routing_table(per_seed)}")
    print("\nseconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    main()
