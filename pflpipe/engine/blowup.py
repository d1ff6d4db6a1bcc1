"""The blow-up rule: when a run with finite losses has still diverged.

A NaN or infinite loss stops a run at once (`Federation`'s finite check). A run can also diverge
with finite losses: its loss jumps far above where it started and its predictions collapse. At
every evaluated round r ≥ 1, for each scored model of a classification run (the personalized
model, and the algorithm's global model when it has one), over the clients scored that round:

    loss_r   > factor × loss_0      and      accuracy_r ≤ chance

- ``loss_r``, ``accuracy_r``: the model's mean loss and accuracy over those clients' validation
  samples (the test samples where the partition has none), each client weighted by its samples;
- ``loss_0``: the same clients' mean loss at round 0, the model the run started from (the warm
  start, or the initial model);
- ``chance``: the accuracy of predicting each client's most frequent label of that split, over
  the same samples (a collapsed personalized model does that; a collapsed global model does
  no better);
- ``factor``: ``federation.divergence_factor`` (its default and why: the spec's field; null
  turns the rule off).

Both must hold: a run that never learns (its loss stays near loss_0) is not a blow-up, nor is a
run whose loss rises while its predictions stay useful (over-fitting). Pooling over clients keeps
the rule robust on clients with a handful of validation samples. A regression run has no chance
level and is not checked.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: The scored models the rule watches: score-key prefix → its name in the message.
VIEWS = {"": "personalized", "global_": "global"}


@dataclass(frozen=True)
class BlowUp:
    """One model's blow-up at one round, and its worst client (by loss ratio)."""

    model: str          # "personalized" or "global"
    member: int         # the worst client's position among the round's scored clients
    loss: float         # loss_r
    start: float        # loss_0
    accuracy: float     # accuracy_r
    chance: float
    member_loss: float
    member_start: float

    def describe(self, split: str, factor: float) -> str:
        """What happened, in words (the client is named by the caller)."""
        return (f"the {self.model} model's mean {split} loss rose to {self.loss:.4g}, "
                f"{self.loss / self.start:.3g}× its round-0 value {self.start:.4g} (more than "
                f"federation.divergence_factor = {factor:g}), and its {split} accuracy fell to "
                f"{self.accuracy:.1%}, no better than predicting each client's most frequent "
                f"label ({self.chance:.1%}); the worst client's loss went from "
                f"{self.member_start:.4g} to {self.member_loss:.4g}")


class Watch:
    """The rule's view of one federation's data: round 0's scores and the chance levels."""

    def __init__(self, data):
        self.data = data
        self.start: dict[str, Tensor] | None = None
        self.majorities: dict[str, Tensor] = {}

    def find(self, rows: list[dict], scores: dict[str, Tensor], clients: Tensor,
             members: Tensor, split: str, factor: float) -> "BlowUp | None":
        """`find` over the scored `clients` at positions `members` (one run's).

        `rows` are the engine's score rows since round 0 (round 0's give loss_0).
        """
        positions = clients[members].cpu()
        data = self.data.split(split)
        if split not in self.majorities:
            self.majorities[split] = majority_counts(data.y, data.offsets)
        return find({k: v[members.to(v.device)] for k, v in scores.items()},
                    {k: v[positions] for k, v in self._start(rows, split).items()}, split,
                    data.counts.cpu()[positions], self.majorities[split][positions], factor)

    def _start(self, rows: list[dict], split: str) -> dict[str, Tensor]:
        """Round 0's losses and accuracies of every client on `split` [C] (all are scored)."""
        if self.start is None:
            first = sorted((r for r in rows if r["round"] == 0 and r["split"] == split),
                           key=lambda r: r["client"])
            self.start = {f"{prefix}{split}_{m}": torch.tensor([r[f"{prefix}{m}"] for r in first])
                          for prefix in VIEWS if f"{prefix}loss" in first[0]
                          for m in ("loss", "accuracy")}
        return self.start


def majority_counts(y: Tensor, offsets: Tensor) -> Tensor:
    """Per client, how many of its samples carry its most frequent label [C].

    >>> majority_counts(torch.tensor([3, 3, 1, 2, 2, 2, 0]), torch.tensor([0, 3, 3, 7]))
    tensor([2, 0, 3])
    """
    y, offsets = y.cpu().long(), offsets.cpu().long()
    counts = offsets[1:] - offsets[:-1]
    client = torch.repeat_interleave(torch.arange(len(counts)), counts)
    table = torch.zeros(len(counts), int(y.max()) + 1 if len(y) else 1, dtype=torch.long)
    table.index_put_((client, y), torch.ones_like(y), accumulate=True)
    return table.max(1).values


def find(scores: dict[str, Tensor], start: dict[str, Tensor], split: str, counts: Tensor,
         majority: Tensor, factor: float) -> BlowUp | None:
    """The first watched model of `scores` that blew up, or None.

    `scores` and `start` hold ``{prefix}{split}_loss`` / ``_accuracy`` [C'] of the round's scored
    clients, now and at round 0; `counts` and `majority` [C'] their samples in `split` and
    their most frequent label's count there.
    """
    n = counts.double().cpu()
    if n.sum() == 0:
        return None
    chance = float(majority.double().cpu().sum() / n.sum())
    for prefix, name in VIEWS.items():
        key = f"{prefix}{split}_loss"
        if key not in scores:
            continue
        loss, loss0 = scores[key].double().cpu(), start[key].double().cpu()
        accuracy = scores[f"{prefix}{split}_accuracy"].double().cpu()
        has = n > 0
        mean, mean0 = _pooled(loss, n, has), _pooled(loss0, n, has)
        acc = _pooled(accuracy, n, has)
        if math.isnan(acc) or not (mean > factor * mean0 and acc <= chance):
            continue
        ratio = torch.where(has, loss / loss0.clamp_min(1e-12), torch.full_like(loss, -math.inf))
        member = int(ratio.argmax())
        return BlowUp(name, member, mean, mean0, acc, chance, float(loss[member]),
                      float(loss0[member]))
    return None


def _pooled(values: Tensor, n: Tensor, has: Tensor) -> float:
    """The sample-weighted mean of `values` over the clients with samples."""
    return float((values[has] * n[has]).sum() / n[has].sum())
