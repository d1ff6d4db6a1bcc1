"""Score many members at once, each on its own client's samples of one split."""

import itertools
from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import vmap
from torch.nn import functional as F

from pflpipe.engine.data import SplitData
from pflpipe.engine.protocol import AlgorithmProtocol
from pflpipe.engine.tree import Tree, is_identity, tree_map

#: predict(state, shared, x, ctx) -> outputs of ONE member; with `keys`, predict(…, ctx, key).
Predict = Callable[..., Tensor]


#: The most (member, sample) positions one forward pass scores: its inputs and activations are
#: held at once (1,000 members × 512 positions of the default MLP held 0.5 GB; in passes of
#: 16,384 the 1,000 members score faster too, 0.7 s instead of 2.2 s on two cores).
POSITIONS = 1 << 14


@torch.no_grad()
def evaluate(ctx, predict: Predict, state: Tree, shared: Tree, split: SplitData, clients: Tensor,
             chunk: int = 512, keys: Tensor | None = None, positions: int = POSITIONS
             ) -> tuple[Tensor, Tensor]:
    """Mean loss [M] and accuracy [M] of every member on its client's samples of `split`.

    Members are sorted by sample count so that, for each chunk of sample positions, the members
    that still have samples form a prefix; work is proportional to the real number of samples.
    A chunk's members are scored in passes of at most `positions` // chunk (a member gets the
    same bits in any pass of several members; alone, it may differ in the last bit). Accuracy is
    NaN for a regression task; both are NaN for a client with no samples. `keys` [M] (int64) are
    the members' noise keys, passed on to `predict` when given.
    """
    device = split.x.device
    counts = split.counts[clients.to(split.offsets.device)].to(device)
    order = torch.argsort(counts.cpu(), descending=True, stable=True)
    identity = is_identity(order, len(order))
    order = order.to(device)
    sorted_counts, starts = counts[order], split.offsets[clients.to(device)][order]
    if not identity:   # already in order (equal clients): no copy of every member's state
        state = tree_map(lambda t: t[order], state)
    if keys is None:
        member, keys = (lambda st, x, key: predict(st, shared, x, ctx)), torch.zeros_like(order)
    else:
        member, keys = (lambda st, x, key: predict(st, shared, x, ctx, key)), keys.to(device)[order]
    loss_sum = torch.zeros(len(order), device=device)
    correct = torch.zeros(len(order), device=device)
    batched = vmap(member, in_dims=(0, 0, 0))
    largest = int(sorted_counts.max()) if len(order) else 0
    chunk = max(1, min(chunk, largest))  # small clients: no padding up to `chunk` positions
    members = max(1, positions // chunk)
    for start in range(0, largest, chunk):
        k = int((sorted_counts > start).sum())
        passes = -(-k // members)   # of near-equal sizes: no pass of one member left over
        for first, stop in itertools.pairwise(k * i // passes for i in range(passes + 1)):
            m = slice(first, stop)
            loss, hits = _sums(ctx, batched, tree_map(lambda t, m=m: t[m], state), split,
                               keys[m], starts[m], sorted_counts[m], start, chunk)
            loss_sum[m] += loss
            correct[m] += hits
    n = sorted_counts.float()
    loss, accuracy = loss_sum / n, correct / n
    if ctx.task == "regression":
        accuracy = torch.full_like(loss, float("nan"))
    if identity:
        return loss, accuracy
    inverse = torch.argsort(order)
    return loss[inverse], accuracy[inverse]


def _sums(ctx, batched, state: Tree, split: SplitData, keys: Tensor, starts: Tensor,
          counts: Tensor, start: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Summed loss and hits [M] of members at sample positions start … start + chunk − 1."""
    local = torch.arange(start, start + chunk, device=starts.device).expand(len(starts), chunk)
    valid = local < counts[:, None]
    rows = starts[:, None] + torch.minimum(local, counts[:, None] - 1)
    outputs, targets = batched(state, split.x[rows], keys), split.y[rows]
    if ctx.task == "regression":
        per_sample = (outputs.squeeze(-1) - targets) ** 2
        hits = torch.zeros_like(per_sample)
    else:
        per_sample = F.cross_entropy(outputs.flatten(0, 1), targets.flatten(),
                                     reduction="none").view(len(starts), chunk)
        hits = (outputs.argmax(-1) == targets).float()
    return (per_sample * valid).sum(1), (hits * valid).sum(1)


def member_predict(algorithm: AlgorithmProtocol, view: str = "") -> Predict:
    """Adapt `algorithm.predict` to `evaluate`'s signature: each member its own model."""
    def predict(model: Tree, shared: Tree, x: Tensor, ctx, key: Tensor) -> Tensor:
        if view:
            return algorithm.predict(model, x, ctx, key, view=view)
        return algorithm.predict(model, x, ctx, key)

    return predict


def forward_shared(model: Tree, shared: Tree, x: Tensor, ctx, key: Tensor) -> Tensor:
    """`evaluate`'s predict for one network shared by every member (``shared["model"]``)."""
    return ctx.forward(shared["model"], x)
