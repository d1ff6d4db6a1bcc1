"""FedAvg on the thesis's MNIST DNN: pflpipe's engine vs PFLlib's training loop, same partition.

    python benchmarks/peers.py --pfllib PATH/TO/PFLlib [--clients 20] [--rounds 5] [--spec SPEC]

PFLlib (https://github.com/TsingZ0/PFLlib) is not a package: clone it and install what its
`system/main.py` imports (torch, torchvision, numpy, scikit-learn, h5py); `--pfllib` (or
$PFLLIB_DIR) names the clone. Without it, only pflpipe's rows are printed.

The partition: by default a synthetic MNIST-shaped pool (70,000 samples, 1×28×28) split IID over
`--clients`, 60/20/20 per client; `--spec` takes an MNIST spec instead (e.g.
specs/persfl-mnist-ds1.yaml, whose MNIST files must be in its `dataset.root`). pflpipe writes it
(the partition_data stage) and exports it to PFLlib's layout, exactly as `pflpipe split SPEC
--export pfllib DIR` does, into a temporary `dataset/MNIST-pflpipe/` that PFLlib reads (`MNIST`
in the name makes PFLlib's `-m dnn` the 784 → 100 → 10 DNN).

Both run FedAvg with every client per round, batch 20, one local epoch of SGD at the spec's
learning rate. PFLlib's number is its own "Average time cost per round" (rounds 1..R, after its
round 0 that also evaluates); pflpipe's is the time of R rounds more than one round, so evaluation
and set-up are left out of both. PFLlib drops each client's last short batch (`drop_last=True`),
so it does slightly less work than pflpipe, and reads each client's file every round.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pflpipe.algorithms import FedAvg
from pflpipe.data.export import export_partition
from pflpipe.engine.compiled import CompiledTrainer
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer
from pflpipe.spec import parse_spec, read_spec
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup

SPEC = """\
experiment: {{name: bench-peers}}
dataset: {{name: arrays, root: {root}, path: pool.npz, n_classes: 10}}
partition: {{strategy: iid, n_clients: {clients}}}
model: {{architecture: mlp}}
federation: {{rounds: {rounds}, batch_size: 20, lr: 0.05}}
engine: {{device: cpu}}
"""
DATASET = "MNIST-pflpipe"
PER_ROUND = re.compile(r"Average time cost per round\.\s*\n\s*([0-9.eE+-]+)")


def synthetic_spec(root: Path, clients: int, rounds: int):
    """Write a learnable MNIST-shaped pool under `root`; return the spec that partitions it."""
    generator = np.random.default_rng(0)
    x = generator.random((70_000, 28, 28), dtype=np.float32)
    np.savez(root / "pool.npz", x=x, y=x.reshape(len(x), -1)[:, :10].argmax(1))
    return parse_spec(SPEC.format(root=root, clients=clients, rounds=rounds))


def pflpipe_seconds_per_round(spec, partition_dir: Path, rounds: int, trainer) -> float:
    """Seconds per FedAvg round on the engine: (R + 1 rounds − 1 round) / R."""
    s = stage_setup.setup(spec, spec.experiment.seeds[0], partition_dir)
    fed = spec.federation
    algorithm = FedAvg(None, head=frozenset(), lr=fed.lr, local_epochs=1)

    def run(n_rounds: int) -> float:
        plan = Plan(rounds=n_rounds, local_epochs=1, batch_size=fed.batch_size, lr=fed.lr,
                    seed=0, eval_every=10_000, score_global=False)
        start = time.perf_counter()
        Federation(algorithm, s.ctx, s.data, trainer(s.ctx), plan).run(s.init)
        return time.perf_counter() - start

    return (run(rounds + 1) - run(1)) / rounds


def pfllib_seconds_per_round(pfllib: Path, data_root: Path, spec, n_clients: int,
                             rounds: int) -> float:
    """PFLlib's own mean time per round of `system/main.py -algo FedAvg -m dnn`."""
    workdir = data_root / "system"   # PFLlib reads ../dataset/<name> from its working directory
    workdir.mkdir(exist_ok=True)
    fed = spec.federation
    command = [sys.executable, str(pfllib / "system" / "main.py"), "-data", DATASET, "-m", "dnn",
               "-algo", "FedAvg", "-gr", str(rounds), "-ls", "1", "-lbs", str(fed.batch_size),
               "-lr", str(fed.lr), "-nc", str(n_clients), "-jr", "1", "-nb", "10",
               "-eg", str(rounds + 1), "-t", "1", "-dev", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(pfllib / "system")}
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    match = PER_ROUND.search(done.stdout)
    if done.returncode or not match:
        raise SystemExit(f"PFLlib failed (exit {done.returncode}):\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-2000:]}")
    return float(match.group(1))


def main() -> None:
    """Print seconds per round of each loop and pflpipe's speed-up over PFLlib."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pfllib", type=Path, default=os.environ.get("PFLLIB_DIR"),
                        help="A clone of PFLlib (default $PFLLIB_DIR)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--spec", type=Path, help="An MNIST spec instead of synthetic data")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled engine")
    args = parser.parse_args()
    pfllib = args.pfllib if args.pfllib and (args.pfllib / "system" / "main.py").is_file() else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = read_spec(args.spec) if args.spec else synthetic_spec(root, args.clients,
                                                                     args.rounds)
        if getattr(spec.model, "hidden", None) != [100]:
            raise SystemExit("the spec's model must be the MNIST DNN (model: {architecture: mlp}),"
                             " the network PFLlib's `-m dnn` builds")
        partition_dir = root / "partition"
        n_clients = len(partition_data.run(spec, spec.experiment.seeds[0], partition_dir).clients)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; FedAvg, "
              f"{n_clients} clients, {args.rounds} timed rounds, {spec.dataset.name}")
        rows = {"pflpipe batched": BatchedTrainer, "pflpipe sequential": SequentialTrainer}
        if not args.no_compile:
            rows["pflpipe compiled"] = lambda ctx: CompiledTrainer(ctx)
        seconds = {name: pflpipe_seconds_per_round(spec, partition_dir, args.rounds, trainer)
                   for name, trainer in rows.items()}
        if pfllib is None:
            print("PFLlib: skipped — not found (give --pfllib PATH or $PFLLIB_DIR, a clone of "
                  "https://github.com/TsingZ0/PFLlib; docs/performance.md)")
        else:
            export_partition(partition_dir, "pfllib", root / "dataset" / DATASET)
            seconds["PFLlib"] = pfllib_seconds_per_round(pfllib, root, spec, n_clients,
                                                         args.rounds)
        reference = seconds.get("PFLlib")
        for name, value in seconds.items():
            ratio = f"{reference / value:6.2f}× PFLlib" if reference else ""
            print(f"  {name:<20} {value:8.3f} s/round  {ratio}")


if __name__ == "__main__":
    main()
