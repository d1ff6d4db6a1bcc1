"""FedAvg rounds per second: the client-batched engine vs the sequential reference, same work.

    python benchmarks/engine.py [--rounds 3] [--device cpu|cuda|all]

Configurations: the thesis's MNIST DNN (784 → 100 → 10) on MNIST-shaped synthetic data, with
digits-sized (1,797 samples) and MNIST-sized (70,000) pools over 10 and 100 clients (IID split,
60 % train), batch 20, one local epoch per round. Prints one table with the ratio per row.
"""

import argparse
import time

import torch

from pflpipe.algorithms import FedAvg
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer
from pflpipe.models import Mlp


def make_data(n_samples: int, n_clients: int, device: torch.device, seed: int = 0):
    """MNIST-shaped random images with learnable labels, split IID over clients."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n_samples, 1, 28, 28, generator=generator)
    y = (x.view(n_samples, -1)[:, :10].argmax(1))
    parts = torch.randperm(n_samples, generator=generator).tensor_split(n_clients)
    splits = {"train": [], "val": [], "test": []}
    for part in parts:
        a, b = int(0.6 * len(part)), int(0.8 * len(part))
        for name, idx in (("train", part[:a]), ("val", part[a:b]), ("test", part[b:])):
            splits[name].append(idx)
    return FederatedData(**{name: SplitData.from_clients([x[i] for i in idx], [y[i] for i in idx])
                            for name, idx in splits.items()}).to(device)


def rounds_per_second(trainer_cls, data, rounds: int, device) -> float:
    """Time `rounds` FedAvg rounds after one warm-up round."""
    model = Mlp((1, 28, 28), 10).to(device)
    ctx = Context(model)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    algorithm = FedAvg(None, head=frozenset(), lr=0.05, local_epochs=1)

    def run(n_rounds):
        plan = Plan(rounds=n_rounds, local_epochs=1, batch_size=20, lr=0.05, seed=0,
                    eval_every=10_000)
        Federation(algorithm, ctx, data, trainer_cls(ctx), plan).run(init)

    run(1)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run(rounds)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return rounds / (time.perf_counter() - start)


def main() -> None:
    """Print batched vs sequential rounds per second for every configuration."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    args = parser.parse_args()
    devices = [torch.device("cpu")] if args.device != "cuda" else []
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'device':6} {'pool':>6} {'clients':>7} {'batched r/s':>12} {'sequential r/s':>15} "
          f"{'ratio':>6}")
    for device in devices:
        for n_samples, label in ((1797, "digits"), (70_000, "mnist")):
            for n_clients in (10, 100):
                data = make_data(n_samples, n_clients, device)
                batched = rounds_per_second(BatchedTrainer, data, args.rounds, device)
                sequential = rounds_per_second(SequentialTrainer, data, args.rounds, device)
                print(f"{device.type:6} {label:>6} {n_clients:>7} {batched:>12.2f} "
                      f"{sequential:>15.2f} {batched / sequential:>5.1f}×", flush=True)


if __name__ == "__main__":
    main()
