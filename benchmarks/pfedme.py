"""pFedMe's cost against FedPer's, before and after its inner problem was batched properly.

    python benchmarks/pfedme.py [--clients 10 50] [--repeat 5] [--threads 1]

pFedMe solves an inner problem on every mini-batch: K = 5 gradient steps on θ for
f(θ) + λ/2 ‖θ − w‖². "before" is the first implementation (kept here as the baseline): each inner
step took `torch.func.grad` of the whole inner objective, so autograd also traced the proximal
term. "after" (pflpipe/algorithms/pfedme.py) differentiates only f and adds λ(θ − w) in closed
form. Both give the same numbers (tests/algorithms/test_pfedme.py).

First a profile of one inner step (every client at once, vmapped as in the engine), then rounds
per second of FedPer and both pFedMe versions on the thesis's MNIST DNN (784 → 100 → 10),
MNIST-shaped synthetic data, batch 20, one local epoch, every client each round. Variants are
timed interleaved and the fastest of `--repeat` runs is kept (the machine may be shared).
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.func import grad, vmap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import make_data  # noqa: E402 - the engine benchmark's data, same shapes

from pflpipe.algorithms.fedper import FedPer  # noqa: E402
from pflpipe.algorithms.pfedme import PFedMe  # noqa: E402
from pflpipe.engine.federation import Federation, Plan  # noqa: E402
from pflpipe.engine.trainer import BatchedTrainer, Context  # noqa: E402
from pflpipe.engine.tree import sq_dist  # noqa: E402
from pflpipe.models import Mlp  # noqa: E402
from pflpipe.spec.algorithms import FedPerParams, PFedMeParams  # noqa: E402


class PFedMeBefore(PFedMe):
    """The first implementation: autograd through the whole inner objective, proximal term too."""

    def local_objective(self, state, batch, shared, hp, ctx):
        p = self.params
        w = {k: value.detach() for k, value in state["model"].items()}

        def inner(theta):
            return ctx.task_loss(theta, batch) + p.lam / 2 * sq_dist(theta, w)

        theta = state["personal"]
        for _ in range(p.inner_steps):
            grads = torch.func.grad(inner)(theta)
            theta = {k: theta[k] - p.personal_lr * grads[k] for k in theta}
        theta = {k: value.detach() for k, value in theta.items()}
        return p.lam / 2 * sq_dist(state["model"], theta), {"personal": theta}


def seconds(fn, repeat: int) -> float:
    """Fastest of `repeat` calls after a warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def profile_inner_step(n_clients: int, repeat: int) -> dict[str, float]:
    """Milliseconds of one inner step's parts for `n_clients` clients at once."""
    model = Mlp((1, 28, 28), 10)
    ctx = Context(model)
    theta = {k: v.detach().expand(n_clients, *v.shape).clone() for k, v in
             model.state_dict().items()}
    w = {k: v.clone() for k, v in theta.items()}
    batch = {"x": torch.randn(n_clients, 20, 1, 28, 28),
             "y": torch.randint(0, 10, (n_clients, 20)), "mask": torch.ones(n_clients, 20)}
    lam = 15.0
    task = vmap(grad(ctx.task_loss))
    proximal = vmap(grad(lambda t, w: lam / 2 * sq_dist(t, w)))
    parts = {"task-loss gradient": lambda: task(theta, batch),
             "proximal gradient, autograd": lambda: proximal(theta, w),
             "proximal gradient, closed form": lambda: {k: lam * (theta[k] - w[k])
                                                        for k in theta}}
    return {name: 1000 * seconds(fn, repeat) for name, fn in parts.items()}


def round_seconds(n_clients: int, repeat: int) -> dict[str, float]:
    """Seconds per round of each variant (timed interleaved, fastest kept)."""
    data = make_data(n_clients, (1, 28, 28), torch.device("cpu"), pool=180 * n_clients)
    model = Mlp((1, 28, 28), 10)
    ctx = Context(model)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    head = frozenset(k for k in init if k.startswith("head."))
    variants = {
        "fedper": FedPer(FedPerParams(name="fedper"), head=head, lr=0.05, local_epochs=1),
        "pfedme before": PFedMeBefore(PFedMeParams(name="pfedme"), head=head, lr=0.05,
                                      local_epochs=1),
        "pfedme after": PFedMe(PFedMeParams(name="pfedme"), head=head, lr=0.05, local_epochs=1),
    }
    plan = Plan(rounds=1, local_epochs=1, batch_size=20, lr=0.05, seed=0)
    best = dict.fromkeys(variants, float("inf"))
    for algorithm in variants.values():  # warm-up
        Federation(algorithm, ctx, data, BatchedTrainer(ctx), plan).run(init)
    for _ in range(repeat):
        for name, algorithm in variants.items():
            start = time.perf_counter()
            Federation(algorithm, ctx, data, BatchedTrainer(ctx), plan).run(init)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    """Print the inner-step profile and the per-round table with its ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s); fastest of "
          f"{args.repeat}")
    for n_clients in args.clients:
        parts = profile_inner_step(n_clients, args.repeat)
        print(f"\none inner step, {n_clients} clients at once: " + ", ".join(
            f"{name} {ms:.1f} ms" for name, ms in parts.items()))
    print(f"\n{'clients':>7} {'fedper s/r':>10} {'autograd s/r':>12} {'closed s/r':>10} "
          f"{'autograd/closed':>15} {'autograd/fedper':>15} {'closed/fedper':>13}")
    for n_clients in args.clients:
        t = round_seconds(n_clients, args.repeat)
        fedper, before, after = t["fedper"], t["pfedme before"], t["pfedme after"]
        print(f"{n_clients:>7} {fedper:>10.3f} {before:>12.3f} {after:>10.3f} "
              f"{before / after:>14.2f}× {before / fedper:>14.2f}× {after / fedper:>12.2f}×",
              flush=True)


if __name__ == "__main__":
    main()
