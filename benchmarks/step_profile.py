"""Why compiled steps stay under 5× a plain loop on CPU: one step's costs at 100 members.

    python benchmarks/step_profile.py [--members 100] [--precision fp32|bf16]

One thread, CPU seconds. The MNIST DNN (784 → 100 → 10), batch 20: a plain step
(`torch.optim.SGD`, one model) against, per member of a stacked step of `--members` members, the
arithmetic alone — the batched matrix products of forward and backward and the SGD update — and
two of its parts: the two 784 × 100 products, and the update of the stacked 784 × 100 weights
(memory-bound: `--members` × 314 KB, far beyond the caches, where one plain model stays in L2).
The plain step over the arithmetic is the most any batched CPU engine can gain per step.
"""

import argparse
import time

import torch
from torch.nn import functional as F

B, LR = 20, 0.05


def per_call(fn, n: int) -> float:
    """CPU seconds per call of `fn` (after one warm-up call)."""
    fn()
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def main() -> None:
    """Print the plain step's cost and the per-member costs of a stacked step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    m, dtype = args.members, torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 100), torch.nn.ReLU(),
                                torch.nn.Linear(100, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.rand(B, 1, 28, 28), torch.randint(0, 10, (B,))

    def plain():
        optimizer.zero_grad()
        with torch.autocast("cpu", torch.bfloat16, enabled=args.precision == "bf16"):
            output = model(x)
        F.cross_entropy(output.float(), y).backward()
        optimizer.step()

    xs, hs, gs = torch.rand(m, B, 784), torch.rand(m, B, 100), torch.rand(m, B, 10)
    w1, w2 = torch.rand(m, 784, 100), torch.rand(m, 100, 10)

    def products():
        c = (lambda t: t.to(dtype)) if dtype != torch.float32 else (lambda t: t)
        torch.bmm(c(xs), c(w1)), torch.bmm(c(hs), c(w2))
        g2 = torch.bmm(c(hs).transpose(1, 2), c(gs))
        gh = torch.bmm(c(gs), c(w2).transpose(1, 2))
        g1 = torch.bmm(c(xs).transpose(1, 2), gh)
        return g1.float(), g2.float()

    def arithmetic():
        g1, g2 = products()
        w1.sub_(g1, alpha=LR)
        w2.sub_(g2, alpha=LR)

    def first_layer():
        torch.bmm(xs, w1), torch.bmm(xs.transpose(1, 2), hs)

    def update():
        w1.sub_(w1, alpha=LR)

    plain_s = per_call(plain, 300)
    arith_s = per_call(arithmetic, 20) / m
    print(f"plain step {plain_s * 1e3:.3f} ms; per member of {m}: products + SGD "
          f"{arith_s * 1e3:.3f} ms, the two 784×100 products (fp32) "
          f"{per_call(first_layer, 20) / m * 1e3:.3f} ms, the SGD update of the 784×100 weights "
          f"{per_call(update, 20) / m * 1e3:.3f} ms; plain / arithmetic = {plain_s / arith_s:.2f}×"
          f" ({args.precision})")


if __name__ == "__main__":
    main()
