"""What checkpointing every round costs a long run: the same federation with and without a store.

    python benchmarks/checkpoints.py [--rounds 100] [--clients 10] [--algorithm ditto]

Digits (specs/persfl-digits.yaml's data, model and federation settings), `--clients` clients,
one local epoch a round, every client scored every round, one torch thread. It trains the run
twice, checkpointing every round into a local store and with no store, and prints both wall
times, the checkpoints' share and the seconds spent in `checkpoint.save`. Before the score rows
went into per-checkpoint chunks (``rows_NNNN.pt``), every checkpoint rewrote every row of the run
so far, so a checkpoint's cost grew with the round.
"""

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

from pflpipe.algorithms import build
from pflpipe.engine import checkpoint
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data
from pflpipe.storage.local_dir import LocalStore
from pflpipe.training import stage_setup

SPEC = Path(__file__).resolve().parents[1] / "specs" / "persfl-digits.yaml"


def run(args: argparse.Namespace, root: Path, with_store: bool) -> tuple[float, float]:
    """(wall seconds, seconds inside checkpoint.save) of one run."""
    spec = parse_spec(SPEC.read_text(), overrides={
        "tracking.enabled": False, "engine.threads": 1, "partition.n_clients": args.clients,
        "personalization": [{"name": args.algorithm}]})
    partition_data.run(spec, 0, root / "partition")
    s = stage_setup.setup(spec, 0, root / "partition")
    fed = spec.federation
    plan = Plan(rounds=args.rounds, local_epochs=1, batch_size=fed.batch_size, lr=fed.lr, seed=0,
                optimizer=OptimizerConfig.from_spec(fed), eval_every=1)
    federation = Federation(build(spec.personalization[0], head=s.head, federation=fed), s.ctx,
                            s.data, BatchedTrainer(s.ctx), plan,
                            LocalStore(root / "store") if with_store else None, "bench")
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(federation.run, s.init)
    wall = time.perf_counter() - start
    saved = sum(row[3] for fn, row in pstats.Stats(profile).stats.items()
                if fn[2] == "save" and fn[0] == checkpoint.__file__)
    return wall, saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--algorithm", default="ditto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (with_wall, saved), (without, _) = (run(args, Path(tmp) / name, store)
                                            for name, store in (("store", True), ("none", False)))
    print(f"{args.algorithm}, {args.clients} clients, {args.rounds} rounds (profiled):")
    print("| run | wall s | checkpoint.save s |\n|---|---:|---:|")
    print(f"| checkpoint every round | {with_wall:.1f} | {saved:.1f} |")
    print(f"| no store | {without:.1f} | |")
    print(f"checkpoints: {with_wall / without:.2f}x the run without them")


if __name__ == "__main__":
    sys.exit(main())
