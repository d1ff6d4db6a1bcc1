"""Self-FL on digits from scratch: its ℓ_m, its accuracy per round, Fig. 2b's ablations, Alg. 1/2.

Runs specs/selffl-digits.yaml (digits, 20 DS-3 clients, C = 0.5) stage by stage in-process with
every entry trained from the seeded initial model (`warm_start: none`), as Self-FL's MNIST and
FEMNIST runs are: partition_data → warm_start_fedavg (FedAvg itself, the reference) → personalize
for each Self-FL variant below. Prints, per variant, the mean client test accuracy of the
personalized models at rounds 5, 10, 20 and the last (seed mean), at each client's best-validation
round, and the distribution of the local step counts ℓ_m that Eqn. 8 gave (client-rounds where it
applied).

    python benchmarks/selffl_digits.py --seeds 1 2 --rounds 30

The variants: `self_fl` (all three components), Fig. 2b's "only one component" settings
(`only_init`, `only_steps`, `only_aggregation`; a component off is FedAvg's: global start, the
federation's local epochs, n_m weights), `steps_fixed` (the full method with FedAvg's steps),
`steps_fixed_10ep` (the same with 10 local epochs, about Self-FL's steps: a compute control, as
the paper's FEMNIST baselines at ℓ = 40), `uncapped` (ℓ_max 400 instead of §4.2's 40),
`unscaled` (Eqn. 8's contraction η/σ̂_m² as if the mean loss were the summed likelihood: a
rule pflpipe no longer uses, kept as an ablation), `self_fl_alg2` (Algorithm 2), `actperfl`, and
`fedavg_10ep` (FedAvg as FedProx with μ = 0, 10 local epochs: the compute control of FedAvg).
GA is the global model's test accuracy at the last round (Fig. 2b's metric); the other columns
score the personalized models (a global-only model's personalized model is its global model).
"""

import argparse
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import yaml

from pflpipe.spec import Spec
from pflpipe.stages import partition_data, personalize, warm_start_fedavg
from pflpipe.training import csv_tables

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "specs" / "selffl-digits.yaml"
OFF = {"init": "global", "steps": "fixed", "aggregation": "sample_size"}
VARIANTS = {
    "self_fl": {"name": "self_fl"},
    "only_init": {"name": "self_fl", "steps": "fixed", "aggregation": "sample_size"},
    "only_steps": {"name": "self_fl", "init": "global", "aggregation": "sample_size"},
    "only_aggregation": {"name": "self_fl", "init": "global", "steps": "fixed"},
    "steps_fixed": {"name": "self_fl", "steps": "fixed"},
    "steps_fixed_10ep": {"name": "self_fl", "steps": "fixed", "local_epochs": 10},
    "uncapped": {"name": "self_fl", "max_local_steps": 400},
    "unscaled": {"name": "self_fl", "loss_reduction": "sum"},
    "self_fl_alg2": {"name": "self_fl", "augmented": True},
    "actperfl": {"name": "actperfl"},
    "fedavg_10ep": {"name": "fedprox", "mu": 0.0, "local_epochs": 10},
}
def load(rounds: int, only: list[str] | None, root: Path) -> Spec:
    """The spec with every variant as an entry, `rounds` rounds, no tracking, under `root`."""
    data = yaml.safe_load(SPEC.read_text())
    data["federation"]["rounds"] = rounds
    data["personalization"] = [{**params, "label": label, "warm_start": "none"}
                               for label, params in VARIANTS.items() if not only or label in only]
    data["tracking"] = {"enabled": False}
    data["experiment"]["output_dir"] = str(root / "results")
    data["storage"] = {"kind": "local", "path": str(root / "store")}
    return Spec.model_validate(data)


def local_steps(directory: Path) -> list[int]:
    """ℓ_m of every client-round where Eqn. 8 applied (history.csv's diag.local_steps)."""
    rows = csv_tables.read_csv(directory / "history.csv")
    return [int(float(row["diag.local_steps"])) for row in rows
            if row["split"] == "train" and row.get("diag.local_steps", "nan") not in ("", "nan")]


def curve(directory: Path, scope: str = "") -> dict[int, float]:
    """Round → mean over clients of the test accuracy of the model of `scope` ("": personalized).

    A model without a global scope (FedAvg's stage scores only its global model) gives its own.
    """
    rows = csv_tables.read_csv(directory / "history.csv")
    if not any(row["scope"] == scope for row in rows):
        scope = ""
    per_round = defaultdict(list)
    for row in rows:
        if row["split"] == "test" and row["scope"] == scope and row["accuracy"] != "":
            per_round[int(row["round"])].append(float(row["accuracy"]))
    return {r: statistics.fmean(v) for r, v in sorted(per_round.items())}


def best_val(directory: Path) -> float:
    """Mean client test accuracy at each client's best-validation round (personalized)."""
    rows = [r for r in csv_tables.read_csv(directory / "results.csv")
            if r["selection"] == "best_val" and r["scope"] == "" and r["split"] == "test"]
    return statistics.fmean(float(r["accuracy"]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS))
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="selffl-digits-"))
    spec = load(args.rounds, args.only, root)
    curves, bests, steps = defaultdict(list), defaultdict(list), defaultdict(list)
    ga = defaultdict(list)
    for seed in args.seeds:
        out = root / f"seed-{seed}"
        partition_data.run(spec, seed, out / "partition")
        warm_start_fedavg.run(spec, seed, out / "partition", out / "checkpoints", out / "fedavg")
        labels = ["fedavg"] + [e.display_name for e in spec.personalization]
        for label in labels[1:]:
            personalize.run(spec, seed, label, out / "partition", out / "checkpoints", out / label)
        for label in labels:
            curves[label].append(curve(out / label))
            ga[label].append(curve(out / label, "global")[args.rounds])
            bests[label].append(best_val(out / label))
            steps[label] += local_steps(out / label) if label != "fedavg" else []
    marks = sorted({5, 10, 20, args.rounds} & set(range(1, args.rounds + 1)))
    print(f"seeds {args.seeds}, {args.rounds} rounds, warm_start none; test accuracy (mean over "
          "clients, then seeds)\n")
    print("| model | " + " | ".join(f"round {r}" for r in marks) + " | best-val | GA | ℓ_m: min "
          "/ median / mean / max (client-rounds) |")
    print("|---|" + "---:|" * (len(marks) + 3))
    for label in curves:
        cells = [statistics.fmean(c[r] for c in curves[label]) for r in marks]
        ell = steps.get(label)
        dist = (f"{min(ell)} / {statistics.median(ell):g} / {statistics.fmean(ell):.1f} / "
                f"{max(ell)} ({len(ell)})" if ell else "—")
        print(f"| {label} | " + " | ".join(f"{c:.3f}" for c in cells)
              + f" | {statistics.fmean(bests[label]):.3f} | {statistics.fmean(ga[label]):.3f} | "
              f"{dist} |")
    for label, ell in steps.items():
        if not ell:
            continue
        counts = torch.bincount(torch.tensor(ell)).tolist()
        print(f"\n{label} ℓ_m histogram: " + ", ".join(f"{k}: {n}" for k, n in
                                                       enumerate(counts) if n))


if __name__ == "__main__":
    main()
