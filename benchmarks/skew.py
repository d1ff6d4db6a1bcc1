"""Skewed clients against equal ones with the same total: a FedAvg round's cost, side by side.

    python benchmarks/skew.py [--rounds 3] [--trainers batched compiled plain] [--threads N]
                              [--repeats 3] [--clock wall|cpu]

The skewed federation is ds3-like: 10 clients with log-normal sizes, the largest 1,123 training
rows and the smallest 70 (issue 31's ds3 split of MNIST); the equal one has the same total
training rows spread evenly. Both: the MNIST DNN (784 → 100 → 10) on a synthetic learnable pool,
batch 20, one local epoch of SGD per round (`benchmarks/engine.py`'s work). Each trainer runs one
round first (compiling, for the compiled engine), then `--rounds` rounds timed; the two
federations alternate, `--repeats` times, and the table gives the median round seconds of each
and their ratio. The first-compile cost (seconds of the first round over a timed one) is printed
for the compiled engine.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import engine as bench  # noqa: E402  (benchmarks/engine.py: the same model, data and loops)

from pflpipe.engine.compiled import CompiledTrainer  # noqa: E402
from pflpipe.engine.data import FederatedData, SplitData  # noqa: E402
from pflpipe.engine.trainer import BatchedTrainer  # noqa: E402

LARGEST, SMALLEST, CLIENTS = 1_123, 70, 10


def skewed_sizes(n_clients: int = CLIENTS, seed: int = 0) -> list[int]:
    """Log-normal training sizes (σ = 1) rescaled onto [SMALLEST, LARGEST]."""
    w = np.sort(np.random.default_rng(seed).lognormal(0.0, 1.0, n_clients))[::-1]
    sizes = SMALLEST + (w - w.min()) / (w.max() - w.min()) * (LARGEST - SMALLEST)
    return [int(round(s)) for s in sizes]


def equal_sizes(total: int, n_clients: int = CLIENTS) -> list[int]:
    """`total` rows over `n_clients`, as evenly as integers allow."""
    return [total // n_clients + (c < total % n_clients) for c in range(n_clients)]


def make_data(train_sizes: list[int], device: torch.device, seed: int = 0) -> FederatedData:
    """Clients with `train_sizes` training rows (val and test: a third of that each)."""
    shape = bench.SHAPES["mlp"]
    sizes = [(n, max(1, n // 3), max(1, n // 3)) for n in train_sizes]
    total = sum(sum(s) for s in sizes)
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(total, *shape, generator=generator)
    y = x.view(total, -1)[:, :10].argmax(1)
    splits, start = {"train": [], "val": [], "test": []}, 0
    for client in sizes:
        for name, n in zip(splits, client, strict=True):
            splits[name].append((x[start:start + n], y[start:start + n]))
            start += n
    return FederatedData(**{name: SplitData.from_clients([a for a, _ in parts],
                                                         [b for _, b in parts])
                            for name, parts in splits.items()}).to(device)


def round_seconds(name: str, data: FederatedData, rounds: int, device) -> tuple[float, float]:
    """(first round's seconds, seconds per timed round) of trainer `name`."""
    if name == "plain":
        first, speed = bench.plain_rounds(data, "mlp", rounds, device)
    else:
        factory = {"batched": BatchedTrainer, "compiled": CompiledTrainer}[name]
        first, speed = bench.engine_rounds(factory, data, "mlp", rounds, device)
    return first, 1 / speed


def main() -> None:
    """Print one row per trainer: skewed and equal round seconds and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trainers", nargs="+", default=["plain", "batched", "compiled"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        bench.CLOCK["clock"] = time.process_time
    device = torch.device(args.device)
    skewed = skewed_sizes()
    equal = equal_sizes(sum(skewed))
    data = {"skewed": make_data(skewed, device), "equal": make_data(equal, device)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}, "
          f"{args.clock} clock, load {os.getloadavg()[0]:.1f}; skewed train sizes {skewed} "
          f"(total {sum(skewed)}), equal {equal[0]}; batch {bench.BATCH}")
    print(f"{'trainer':9} {'skewed s/round':>15} {'equal s/round':>14} {'ratio':>6} "
          f"{'first-compile s':>16}")
    for name in args.trainers:
        times, compile_s = {"skewed": [], "equal": []}, []
        for _ in range(args.repeats):
            for split, d in data.items():
                first, per_round = round_seconds(name, d, args.rounds, device)
                times[split].append(per_round)
                compile_s.append(first - per_round)
        s, e = (statistics.median(times[k]) for k in ("skewed", "equal"))
        extra = f"{max(compile_s):>16.1f}" if name == "compiled" else f"{'—':>16}"
        print(f"{name:9} {s:>15.3f} {e:>14.3f} {s / e:>5.2f}× {extra}", flush=True)


if __name__ == "__main__":
    main()
