"""Generalized and personalized accuracy of Flow and its baselines (Flow's Tables 5 and 7).

Runs specs/flow-digits.yaml (digits, 100 clients, Dirichlet(0.1), 10 clients per round) stage by
stage in-process, exactly as the pipeline chains them: partition_data → warm_start_fedavg →
train_local → personalize (one entry per algorithm), then evaluates the results tables with
`pflpipe.metrics.generalization` and prints one Markdown table: per model GA, PA and the % of
clients whose PA beats GA, mean ± std over seeds; and Flow's PA under soft routing (Table 8).

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

from pflpipe.metrics import table_from_records
from pflpipe.metrics.generalization import compare
from pflpipe.spec import Spec
from pflpipe.stages import common, partition_data, personalize, train_local, warm_start_fedavg

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "specs" / "flow-digits.yaml"


def load(overrides: list[str], only: list[str] | None, root: Path) -> Spec:
    """The spec with `--set` overrides, no tracking, results under `root`."""
    data = yaml.safe_load(SPEC.read_text())
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
            for row in common.read_csv(directory / "results.csv")]


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

    lines = ["| model | GA % | PA % | PA > GA (% clients) | PA, soft routing % |",
             "|---|---:|---:|---:|---:|"]
    for model, c in comparisons.items():
        pa_soft = soft_pa.get(model)
        lines.append(f"| {model} | {cell(c.mean['GA'], c.std['GA'])} | "
                     f"{cell(c.mean['PA'], c.std['PA'])} | "
                     f"{cell(c.mean['beats_global'], c.std['beats_global'], 1.0)} | "
                     f"{cell(pa_soft.mean['PA'], pa_soft.std['PA']) if pa_soft else '—'} |")
    return "\n".join(lines)


def main() -> None:
    """Run the seeds; print the tables for both selections and the time per stage."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--only", nargs="+")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="flow-digits-"))
    spec = load(args.overrides, args.only, root)
    seconds: dict[str, float] = {}
    rows = [row for seed in args.seeds for row in run_seed(spec, seed, root, seconds)]
    fed = spec.federation
    print(f"digits, {spec.partition.n_clients} clients, {spec.partition.strategy} "
          f"α = {spec.partition.alpha}, {fed.rounds} rounds × {fed.local_epochs} local epochs, "
          f"{math.ceil(fed.client_fraction * spec.partition.n_clients)} clients per round, "
          f"lr {fed.lr}, seeds {args.seeds}; overrides {args.overrides or 'none'}")
    for selection in ("last_round", "best_val"):
        print(f"\nselection {selection}:\n{table(rows, selection)}")
    print("\nseconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    main()
