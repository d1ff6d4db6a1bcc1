"""PersFL's λ/T grid: 10 clients × 30 students, batched vs sequential, same work.

    python benchmarks/distill.py [--epochs 10] [--device cpu|cuda]

The thesis's MNIST DNN on scikit-learn's digits split DS-1 over 10 clients; each client's teacher
is a perturbed copy of one model; the default grid λ ∈ {0, .25, .5, .75, 1} × T ∈ {1, 5, …, 25}.
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch

from pflpipe.distill import GridConfig, run_grid
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup

SPEC = """\
experiment: {name: bench-distill}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 10}
engine: {device: %s}
"""


def main() -> None:
    """Print the grid's wall time on both trainers and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    spec = parse_spec(SPEC % args.device)
    with tempfile.TemporaryDirectory() as tmp:
        partition_data.run(spec, 0, Path(tmp) / "partition")
        s = stage_setup.setup(spec, 0, Path(tmp) / "partition")
    torch.manual_seed(0)
    teachers = {k: v.unsqueeze(0).repeat(10, *[1] * v.dim()) + 0.05 * torch.randn(
        10, *v.shape, device=v.device) for k, v in s.init.items()}
    config = GridConfig(lambdas=(0, .25, .5, .75, 1), temperatures=(1, 5, 10, 15, 20, 25),
                        epochs=args.epochs, batch_size=20, lr=0.05)
    times = {}
    for name, trainer in (("batched", BatchedTrainer(s.ctx)), ("sequential",
                                                              SequentialTrainer(s.ctx))):
        start = time.perf_counter()
        run_grid(s.ctx, trainer, s.data, teachers, config)
        if s.device.type == "cuda":
            torch.cuda.synchronize()
        times[name] = time.perf_counter() - start
    print(f"10 clients × 30 students, {args.epochs} epochs, {s.device.type}: "
          f"batched {times['batched']:.2f} s, sequential {times['sequential']:.2f} s, "
          f"ratio {times['sequential'] / times['batched']:.1f}×")


if __name__ == "__main__":
    main()
