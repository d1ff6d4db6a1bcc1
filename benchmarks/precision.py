"""`engine.precision`'s effect on accuracy and time: FedAvg (the warm start) on digits.

    python benchmarks/precision.py [--seeds 0 1 2] [--precisions fp32 bf16] [--rounds 40]
                                   [--spec specs/persfl-digits.yaml]

Runs the warm_start_fedavg stage in-process for each seed and precision on the quickstart
spec's partition (digits, 10 clients, DS-2) and prints the mean client test accuracy after the
last round and at the best-validation round, and the stage's seconds, with the difference of
each precision to fp32 (per seed, then the mean).
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from pflpipe.spec import read_spec
from pflpipe.stages import partition_data, warm_start_fedavg


def run(spec_path: str, seed: int, precision: str, rounds: int, root: Path) -> tuple:
    """(last-round accuracy, best-val accuracy, seconds) of one warm start."""
    spec = read_spec(spec_path)
    spec = spec.model_copy(update={
        "engine": spec.engine.model_copy(update={"precision": precision, "compile": False}),
        "federation": spec.federation.model_copy(update={"rounds": rounds}),
        "storage": spec.storage.model_copy(update={"kind": "local",
                                                   "path": str(root / precision / "store")})})
    partition = root / f"partition-{seed}"
    if not partition.exists():
        partition_data.run(spec, seed, partition)
    out = root / precision / str(seed)
    start = time.perf_counter()
    summary = warm_start_fedavg.run(spec, seed, partition, out / "checkpoints", out / "results")
    return summary.test_accuracy, summary.best_test_accuracy, time.perf_counter() - start


def main() -> None:
    """Print one row per precision and seed, and the mean difference to fp32."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default="specs/persfl-digits.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    print(f"{args.spec}, FedAvg {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print(f"{'precision':9} {'seed':>4} {'last acc':>9} {'best acc':>9} {'Δ last':>7} "
          f"{'Δ best':>7} {'seconds':>8}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for precision in args.precisions:
                rows[precision, seed] = run(args.spec, seed, precision, args.rounds, Path(tmp))
                last, best, seconds = rows[precision, seed]
                base = rows.get(("fp32", seed), (last, best))
                print(f"{precision:9} {seed:>4} {last:>9.4f} {best:>9.4f} {last - base[0]:>+7.4f} "
                      f"{best - base[1]:>+7.4f} {seconds:>8.1f}", flush=True)
    for precision in args.precisions:
        last = statistics.mean(rows[precision, s][0] - rows["fp32", s][0] for s in args.seeds)
        best = statistics.mean(rows[precision, s][1] - rows["fp32", s][1] for s in args.seeds)
        print(f"{precision}: mean Δ vs fp32 over {len(args.seeds)} seeds: last {last:+.4f}, "
              f"best {best:+.4f}")


if __name__ == "__main__":
    main()
