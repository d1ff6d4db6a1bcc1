"""Seconds per round at cross-device scale: 1,000 clients, 10 or 50 sampled per round.

    python benchmarks/cross_device.py [--rounds 8] [--device cpu|cuda] [--threads 1]

MNIST-shaped synthetic images (60 per client, IID, 60 % train), the thesis's MNIST DNN
(784 → 100 → 10), batch 20, one local epoch. For FedAvg and Flow, each row gives the median
time of the rounds between the first and the last (which score every client) with evaluation of
every client each round (`eval_clients: all`) and of the round's sampled clients only
(`sampled`), for 100 and 1,000 clients in all. With `sampled`, a round's cost should not grow
with the federation's size.
"""

import argparse
import statistics
import time

import torch
from engine import make_data  # benchmarks/engine.py

from pflpipe.algorithms import FedAvg
from pflpipe.algorithms.flow import Flow
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context
from pflpipe.models import Mlp
from pflpipe.spec.algorithms import FlowParams


def seconds_per_round(algorithm, n_clients: int, per_round: int, eval_clients: str,
                      rounds: int, device: torch.device) -> float:
    """Median wall time of rounds 2 … rounds − 1 (round 1 warms up; the last scores everyone)."""
    data = make_data(n_clients, (1, 28, 28), device, pool=60 * n_clients)
    model = Mlp((1, 28, 28), 10).to(device)
    ctx = Context(model)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stamps = []

    def on_round(round_idx, rows):
        if device.type == "cuda":
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())

    plan = Plan(rounds=rounds, local_epochs=1, batch_size=20, lr=0.05, seed=0,
                client_fraction=per_round / n_clients, eval_clients=eval_clients)
    Federation(algorithm, ctx, data, BatchedTrainer(ctx), plan, on_round=on_round).run(init)
    timed = stamps[:-1]   # the last round ends with a full evaluation
    return statistics.median(b - a for a, b in zip(timed, timed[1:], strict=False))


def main() -> None:
    """Print seconds per round for every configuration, and the all / sampled ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    algorithms = {
        "fedavg": FedAvg(None, head=frozenset({"head.weight", "head.bias"}), lr=0.05,
                         local_epochs=1),
        "flow": Flow(FlowParams(name="flow"), head=frozenset(), lr=0.05, local_epochs=1)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {device}")
    print(f"{'algorithm':9} {'clients':>7} {'sampled':>7} {'eval all s/r':>12} "
          f"{'eval sampled s/r':>16} {'ratio':>6}")
    for name, algorithm in algorithms.items():
        for n_clients in (100, 1000):
            for per_round in (10, 50):
                every = seconds_per_round(algorithm, n_clients, per_round, "all", args.rounds,
                                          device)
                sampled = seconds_per_round(algorithm, n_clients, per_round, "sampled",
                                            args.rounds, device)
                print(f"{name:9} {n_clients:>7} {per_round:>7} {every:>12.3f} {sampled:>16.3f} "
                      f"{every / sampled:>5.1f}×", flush=True)


if __name__ == "__main__":
    main()
