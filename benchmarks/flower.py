"""pflpipe's FedAvg warm start vs the exported Flower app in Flower's simulation, same partition.

    python benchmarks/flower.py [--spec SPEC] [--rounds R] [--work DIR]

Needs `flwr[simulation]` (an optional dependency: `pip install 'flwr[simulation]'`). The spec's
partition is written and exported exactly as `pflpipe split SPEC --export flower DIR` does; then
pflpipe's warm start (`warm_start_fedavg`) and the exported ServerApp/ClientApp on Flower's Ray
simulation (`flwr.simulation.run_simulation`, one SuperNode per client) each run R rounds. Prints
both per-client test-accuracy tables after the last round side by side, whether every client's
accuracy agrees at every round, and both wall-clock times (Flower's includes Ray's start-up, which
it also prints alone as the time to the first round).

Without `--spec`: digits, ds2 (α = 0.5) over 10 clients, train/test 0.75/0.25, the default MLP,
SGD lr 0.05, batch 20, one local epoch, 30 rounds (issue 32's setting).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SPEC = """\
experiment: {{name: flower-bench, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds2, n_clients: 10, alpha: 0.5, fractions: {{train: 0.75, test: 0.25}}}}
federation: {{rounds: {rounds}, lr: 0.05, batch_size: 20, local_epochs: 1}}
personalization: []
tracking: {{enabled: false}}
"""


def pflpipe_run(spec_path: Path, work: Path) -> tuple[dict, float]:
    """Split, export and run pflpipe's warm start; return {(round, client): accuracy}, seconds."""
    from pflpipe.cli import main
    from pflpipe.spec import read_spec
    from pflpipe.stages import warm_start_fedavg
    from pflpipe.training import csv_tables

    if main(["split", str(spec_path), "-o", str(work / "partition"), "--rows", "0",
             "--export", "flower", str(work / "flower"), "--force"]) != 0:
        raise SystemExit("pflpipe split failed")
    spec = read_spec(spec_path)
    start = time.perf_counter()
    warm_start_fedavg.run(spec, spec.experiment.seeds[0], work / "partition", work / "ck",
                          work / "fedavg")
    seconds = time.perf_counter() - start
    rows = csv_tables.read_csv(work / "fedavg" / "history.csv")
    return ({(int(r["round"]), int(r["client"])): float(r["accuracy"]) for r in rows
             if r["split"] == "test"}, seconds)


def flower_run(export: Path) -> tuple[dict, float, float]:
    """Run the exported app on Flower's simulation; return accuracies, seconds, start-up s.

    Start-up is the time until round 1 begins: Ray, the SuperNodes and round 0's evaluation.
    """
    from flwr.simulation import run_simulation

    sys.path.insert(0, str(export))   # and for Ray's worker processes:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(export),
                                                             os.environ.get("PYTHONPATH")]))
    from pflpipe_fedavg import client_app, server_app, task

    n_clients = task.Package.load(export).n_clients
    marks, sample = {}, task.sampled_clients

    def timed_sample(package, server_round):   # the server's loop calls it as a round starts
        marks.setdefault(server_round, time.perf_counter())
        return sample(package, server_round)

    task.sampled_clients = timed_sample
    start = time.perf_counter()
    run_simulation(server_app.app, client_app.app, num_supernodes=n_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    seconds = time.perf_counter() - start
    rows = json.loads((export / server_app.HISTORY).read_text())
    return ({(r["round"], r["client"]): r["accuracy"] for r in rows}, seconds,
            marks.get(1, start) - start)


def main() -> None:
    """Print both tables and both times."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", type=Path, help="A spec (default: issue 32's digits split).")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--work", type=Path, help="Working directory (default: a temporary one).")
    args = parser.parse_args()
    try:
        import flwr
    except ImportError:
        raise SystemExit("flwr is not installed: pip install 'flwr[simulation]'") from None
    work = args.work or Path(tempfile.mkdtemp(prefix="flower-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    spec_path = args.spec
    if spec_path is None:
        spec_path = work / "spec.yaml"
        spec_path.write_text(SPEC.format(out=work / "results", rounds=args.rounds))
    ours, our_seconds = pflpipe_run(spec_path, work)
    theirs, their_seconds, startup = flower_run(work / "flower")
    last = max(r for r, _ in ours)
    clients = sorted(c for r, c in ours if r == last)
    print(f"\nround {last}, per-client test accuracy (flwr {flwr.__version__})\n")
    print("| client | pflpipe | Flower |\n|---:|---:|---:|")
    for c in clients:
        print(f"| {c} | {ours[last, c]:.4f} | {theirs.get((last, c), float('nan')):.4f} |")
    mean = [sum(table[last, c] for c in clients) / len(clients) for table in (ours, theirs)]
    print(f"| mean | {mean[0]:.4f} | {mean[1]:.4f} |")
    same = sum(ours[key] == theirs.get(key) for key in ours)
    print(f"\nidentical at {same} of {len(ours)} (round, client) pairs (rounds 0–{last})")
    print(f"pflpipe warm start: {our_seconds:.1f} s; Flower simulation: {their_seconds:.1f} s "
          f"({startup:.1f} s until round 1 began, then "
          f"{(their_seconds - startup) / last:.2f} s per round)")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
