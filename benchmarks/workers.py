"""A federated stage as 1 process vs N sharded workers (engine.workers): same result, how fast.

    python benchmarks/workers.py [--clients 1000] [--rounds 3] [--workers 2]

Runs the real warm-start stage (FedAvg, one local epoch, batch 20, the spec's MLP) on FedProx's
Synthetic(0.5, 0.5) with `--clients` clients of about 70 samples each, once per worker count,
each from fresh checkpoints. Prints the stage's wall time (worker start-up included), the
seconds per round after the first (start-up excluded), their ratios to one process, and the
largest difference to one process of the global model and of any client's test accuracy.
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch

from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, warm_start_fedavg
from pflpipe.training import csv_tables

SPEC = """\
experiment: {{name: workers-benchmark, output_dir: {root}/out}}
dataset: {{name: synthetic, mean_samples: 3.0, sigma_samples: 0.5, min_samples: 50}}
partition: {{strategy: natural, n_clients: {clients}}}
federation: {{rounds: {rounds}, batch_size: 20, lr: 0.05}}
tracking: {{enabled: false}}
engine: {{device: cpu, workers: {workers}}}
storage: {{kind: local, path: {root}/store-{workers}}}
"""


def run_stage(root: Path, clients: int, rounds: int, workers: int) -> tuple[float, float]:
    """Run the warm start with `workers`; return (wall seconds, seconds per round after the 1st)."""
    spec = parse_spec(SPEC.format(root=root, clients=clients, rounds=rounds, workers=workers))
    if not (root / "partition").exists():
        partition_data.run(spec, 0, root / "partition")
    reported: list[float] = []
    start = time.perf_counter()
    warm_start_fedavg.run(spec, 0, root / "partition", root / f"checkpoints-{workers}",
                          root / f"results-{workers}",
                          on_round=lambda round_idx, rows: reported.append(time.perf_counter()))
    wall = time.perf_counter() - start
    per_round = (reported[-1] - reported[0]) / max(1, len(reported) - 1)
    return wall, per_round


def differences(root: Path, workers: int) -> tuple[float, float]:
    """Largest |difference| to one process: global model entries, client test accuracy."""
    models = [torch.load(root / f"results-{w}" / "models" / "global.pt") for w in (1, workers)]
    model = max(float((models[0][k] - models[1][k]).abs().max()) for k in models[0])
    rows = [csv_tables.read_csv(root / f"results-{w}" / "results.csv") for w in (1, workers)]
    accuracy = max(abs(float(a["accuracy"]) - float(b["accuracy"]))
                   for a, b in zip(*rows, strict=True) if a["split"] == "test")
    return model, accuracy


def main() -> None:
    """Print one row per worker count."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"{args.clients} clients, {args.rounds} rounds")
    print(f"{'workers':>7} {'wall s':>8} {'s/round':>8} {'wall ×':>7} {'round ×':>8} "
          f"{'max |Δ model|':>14} {'max |Δ acc|':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = run_stage(root, args.clients, args.rounds, 1)
        print(f"{1:>7} {base[0]:>8.1f} {base[1]:>8.2f} {1:>6.2f}× {1:>7.2f}× {'':>14} {'':>12}",
              flush=True)
        wall, per_round = run_stage(root, args.clients, args.rounds, args.workers)
        model, accuracy = differences(root, args.workers)
        print(f"{args.workers:>7} {wall:>8.1f} {per_round:>8.2f} {base[0] / wall:>6.2f}× "
              f"{base[1] / per_round:>7.2f}× {model:>14.2e} {accuracy:>12.2e}", flush=True)


if __name__ == "__main__":
    main()
