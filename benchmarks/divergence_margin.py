"""How far a finished run's models stayed from the blow-up rule (`pflpipe.engine.blowup`).

For every seed, model and scored view (personalized, global) of a run's results directory, over
the evaluated rounds r ≥ 1 (pooled over the round's scored clients, as the rule pools): the
largest loss ratio loss_r / loss_0, the largest ratio among rounds whose accuracy was at or
below chance (the rule trips when that exceeds `federation.divergence_factor`), and the smallest
accuracy − chance among rounds whose ratio exceeded the factor. Chance comes from the seed's
partition, made again from the spec (partitions are deterministic).

    pflpipe run specs/persfl-digits.yaml
    python benchmarks/divergence_margin.py specs/persfl-digits.yaml results/persfl-digits/latest

Prints one JSON line per seed, model and view.
"""

import argparse
import csv
import json
import tempfile
from collections import defaultdict
from pathlib import Path

from pflpipe.engine import blowup
from pflpipe.spec import read_spec
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup


def margins(history: list[dict], counts: list[int], majority: list[int], factor: float):
    """Per (model, scope): the rule's quantities over the evaluated rounds (see the module)."""
    split = "val" if any(r["split"] == "val" for r in history) else "test"
    by = defaultdict(dict)
    for row in history:
        if row["split"] == split and row.get("accuracy") not in (None, ""):
            by[(row["model"], row.get("scope", ""), int(row["round"]))][int(row["client"])] = (
                float(row["loss"]), float(row["accuracy"]))
    out = {}
    for (model, scope, round_idx), now in sorted(by.items()):
        start = by.get((model, scope, 0))
        if round_idx == 0 or not start:
            continue
        clients = [c for c in now if counts[c] > 0]
        n = sum(counts[c] for c in clients)
        loss = sum(counts[c] * now[c][0] for c in clients) / n
        loss0 = sum(counts[c] * start[c][0] for c in clients) / n
        acc = sum(counts[c] * now[c][1] for c in clients) / n
        chance = sum(majority[c] for c in clients) / n
        ratio, gap = loss / loss0, acc - chance
        m = out.setdefault((model, scope), {"max_ratio": 0.0, "max_ratio_at_chance": 0.0,
                                            "min_gap_over_factor": None, "rounds": 0,
                                            "min_gap": float("inf")})
        m["rounds"] += 1
        m["max_ratio"] = max(m["max_ratio"], ratio)
        m["min_gap"] = min(m["min_gap"], gap)
        if gap <= 0:
            m["max_ratio_at_chance"] = max(m["max_ratio_at_chance"], ratio)
        if ratio > factor and (m["min_gap_over_factor"] is None or gap < m["min_gap_over_factor"]):
            m["min_gap_over_factor"] = gap
    return out


def main() -> None:
    """Print the margins of every seed's models."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("spec")
    parser.add_argument("run_dir", type=Path, help="a run's results folder (seed-N/<model>/)")
    parser.add_argument("--factor", type=float)
    args = parser.parse_args()
    spec = read_spec(args.spec)
    factor = args.factor or spec.federation.divergence_factor or 3.0
    work = Path(tempfile.mkdtemp(prefix="margin-"))
    for seed_dir in sorted(args.run_dir.glob("seed-*")):
        seed = int(seed_dir.name.split("-")[1])
        partition_data.run(spec, seed, work / f"p{seed}")
        data = stage_setup.setup(spec, seed, work / f"p{seed}").data
        history = [row for path in sorted(seed_dir.glob("*/history.csv"))
                   for row in csv.DictReader(open(path))]
        split = data.split("val" if any(r["split"] == "val" for r in history) else "test")
        counts = split.counts.tolist()
        majority = blowup.majority_counts(split.y, split.offsets).tolist()
        for (model, scope), m in margins(history, counts, majority, factor).items():
            print(json.dumps({"spec": args.spec, "seed": seed, "model": model,
                              "view": scope or "personalized", "factor": factor,
                              **{k: (round(v, 4) if isinstance(v, float) else v)
                                 for k, v in m.items()}}), flush=True)


if __name__ == "__main__":
    main()
