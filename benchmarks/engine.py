"""FedAvg rounds per second: the batched engine (eager and compiled), the SequentialTrainer and a
minimal plain PyTorch loop, on the same work, side by side with ratios.

    python benchmarks/engine.py [--rounds 3] [--clients 10 100 1000] [--model mlp|cnn]
                                [--device cpu|cuda|all] [--threads N] [--clock wall|cpu]
                                [--no-compile] [--no-sequential] [--precision fp32|bf16]

The work: the thesis's MNIST DNN (784 → 100 → 10; `--model cnn`: the CIFAR-10 CNN on 3×32×32
inputs) on a synthetic pool of MNIST's size (70,000 samples) split IID over the clients, 60 % of
each client's samples for training, batch 20, one local epoch of SGD (lr 0.05) per round, the
sample-weighted mean as the new global model, and every client's validation and test loss and
accuracy before the first and after the last round. The plain loop does exactly this with
`torch.optim.SGD` on tensors already in memory: per client, load the global model, one pass over
its shuffled samples, add its weighted parameters.

Each variant runs one round first (for the compiled engine this includes compiling, or loading
compiled graphs from the disk cache), then `--rounds` rounds timed. The table gives the plain
loop's rounds per second and every variant's speed as a multiple of it, and the first round's
extra seconds of the compiled engine (the first-compile cost). `--precision bf16` runs the
engine's forward passes in bfloat16 (`engine.precision`) and the plain loop's under
`torch.autocast`.
"""

import argparse
import os
import time

import torch
from torch.nn import functional as F

from pflpipe.algorithms import FedAvg
from pflpipe.engine.compiled import CompiledTrainer
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, Context, SequentialTrainer
from pflpipe.models import CnnCifar, Mlp

POOL, BATCH, LR = 70_000, 20, 0.05
SHAPES = {"mlp": (1, 28, 28), "cnn": (3, 32, 32)}


def make_data(n_clients: int, shape: tuple[int, ...], device: torch.device, seed: int = 0,
              pool: int = POOL):
    """A learnable synthetic pool of `pool` samples (label: argmax of the first 10), split IID."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(pool, *shape, generator=generator)
    y = x.view(pool, -1)[:, :10].argmax(1)
    parts = torch.randperm(pool, generator=generator).tensor_split(n_clients)
    splits = {"train": [], "val": [], "test": []}
    for part in parts:
        a, b = int(0.6 * len(part)), int(0.8 * len(part))
        for name, idx in (("train", part[:a]), ("val", part[a:b]), ("test", part[b:])):
            splits[name].append(idx)
    return FederatedData(**{name: SplitData.from_clients([x[i] for i in idx], [y[i] for i in idx])
                            for name, idx in splits.items()}).to(device)


def new_model(name: str, device: torch.device) -> torch.nn.Module:
    """The benchmark's network, seeded."""
    torch.manual_seed(0)
    model = Mlp(SHAPES[name], 10) if name == "mlp" else CnnCifar(SHAPES[name], 10)
    return model.to(device)


def engine_rounds(trainer_factory, data, model_name: str, rounds: int, device) -> tuple:
    """(first round's seconds, rounds per second after it) of FedAvg on the engine."""
    model = new_model(model_name, device)
    ctx = Context(model, precision=CLOCK["precision"])
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    algorithm = FedAvg(None, head=frozenset(), lr=LR, local_epochs=1)

    def run(n_rounds):
        plan = Plan(rounds=n_rounds, local_epochs=1, batch_size=BATCH, lr=LR, seed=0,
                    eval_every=10_000, score_global=False)
        Federation(algorithm, ctx, data, trainer_factory(ctx), plan).run(init)

    return _timed(run, rounds, device)


def plain_rounds(data, model_name: str, rounds: int, device) -> tuple:
    """(first round's seconds, rounds per second after it) of the plain PyTorch loop."""
    model = new_model(model_name, device)
    train = [data.train.client(c) for c in range(data.n_clients)]
    n_total = sum(len(y) for _, y in train)

    def run(n_rounds):
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        generator = torch.Generator().manual_seed(0)
        plain_evaluate(model, state, data)
        for _ in range(n_rounds):
            new_state = {k: torch.zeros_like(v) for k, v in state.items()}
            for x, y in train:
                model.load_state_dict(state)
                optimizer = torch.optim.SGD(model.parameters(), lr=LR)
                order = torch.randperm(len(y), generator=generator).to(device)
                for start in range(0, len(y), BATCH):
                    batch = order[start:start + BATCH]
                    optimizer.zero_grad()
                    with torch.autocast(device.type, torch.bfloat16,
                                        enabled=CLOCK["precision"] == "bf16"):
                        output = model(x[batch])
                    F.cross_entropy(output.float(), y[batch]).backward()
                    optimizer.step()
                with torch.no_grad():
                    for key, value in model.state_dict().items():
                        new_state[key] += value * (len(y) / n_total)
            state = new_state
        plain_evaluate(model, state, data)

    return _timed(run, rounds, device)


@torch.no_grad()
def plain_evaluate(model, state, data) -> None:
    """Every client's validation and test loss and accuracy, one client at a time."""
    model.load_state_dict(state)
    for split in (data.val, data.test):
        for client in range(split.n_clients):
            x, y = split.client(client)
            output = model(x)
            F.cross_entropy(output, y).item(), (output.argmax(1) == y).float().mean().item()


#: What `_timed` reads: wall-clock seconds, or this process's CPU seconds (`--clock cpu`); and
#: the precision of the forward passes (`--precision`).
CLOCK = {"clock": time.perf_counter, "precision": "fp32"}


def _timed(run, rounds: int, device) -> tuple[float, float]:
    seconds = []
    for n_rounds in (1, rounds):
        _sync(device)
        start = CLOCK["clock"]()
        run(n_rounds)
        _sync(device)
        seconds.append(CLOCK["clock"]() - start)
    return seconds[0], rounds / seconds[1]


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    """Print one row per device and client count."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--model", default="mlp", choices=sorted(SHAPES))
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: this process's CPU time, for a busy machine (with --threads 1;"
                        " not for CUDA; compiling in worker processes is not counted)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled engine")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="bf16: forward passes in bfloat16 (engine.precision; the plain "
                        "loop under torch.autocast)")
    parser.add_argument("--no-sequential", action="store_true",
                        help="skip the SequentialTrainer (slow at 1,000 clients)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        CLOCK["clock"] = time.process_time
    CLOCK["precision"] = args.precision
    devices = [torch.device("cpu")] if args.device != "cuda" else []
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no CUDA device"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads{gpu}; "
          f"model {args.model}, {args.precision}, {args.rounds} timed rounds, {args.clock} "
          f"clock, load average {os.getloadavg()[0]:.1f}")
    print(f"{'device':6} {'clients':>7} {'plain r/s':>10} {'sequential':>11} {'batched':>8} "
          f"{'compiled':>9} {'compile s':>10}")
    for device in devices:
        for n_clients in args.clients:
            _row(args, device, n_clients)


def _row(args, device, n_clients: int) -> None:
    data = make_data(n_clients, SHAPES[args.model], device)
    _, plain = plain_rounds(data, args.model, args.rounds, device)
    variants = {"sequential": None if args.no_sequential else SequentialTrainer,
                "batched": BatchedTrainer,
                "compiled": None if args.no_compile else
                CompiledTrainer}
    ratios, compile_seconds = {}, float("nan")
    for name, factory in variants.items():
        if factory is None:
            ratios[name] = "—"
            continue
        first, speed = engine_rounds(factory, data, args.model, args.rounds, device)
        ratios[name] = f"{speed / plain:.2f}×"
        if name == "compiled":
            compile_seconds = first - 1 / speed
    print(f"{device.type:6} {n_clients:>7} {plain:>10.3f} {ratios['sequential']:>11} "
          f"{ratios['batched']:>8} {ratios['compiled']:>9} {compile_seconds:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
