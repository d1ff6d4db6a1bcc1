"""Client data laid out for batched training, and the mini-batch schedules both trainers share.

Every client's samples of one split are concatenated into one tensor; `offsets` marks where each
client starts. A member (one model being trained) reads the samples of one client.
"""

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor


@dataclass
class SplitData:
    """One split (train, val or test) of every client, concatenated: x [N, ...], y [N]."""

    x: Tensor
    y: Tensor
    offsets: Tensor  # [C + 1] int64: client c owns rows offsets[c]:offsets[c + 1]
    extra: dict[str, Tensor] = field(default_factory=dict)  # per-sample fields [N, ...]

    @classmethod
    def from_clients(cls, xs: list[Tensor], ys: list[Tensor]) -> "SplitData":
        """Concatenate per-client tensors."""
        counts = torch.tensor([len(y) for y in ys], dtype=torch.long)
        offsets = torch.zeros(len(ys) + 1, dtype=torch.long)
        offsets[1:] = counts.cumsum(0)
        return cls(torch.cat(xs), torch.cat(ys), offsets)

    @property
    def counts(self) -> Tensor:
        """Samples per client [C]."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return len(self.offsets) - 1

    def client(self, client_id: int) -> tuple[Tensor, Tensor]:
        """One client's (x, y)."""
        start, stop = int(self.offsets[client_id]), int(self.offsets[client_id + 1])
        return self.x[start:stop], self.y[start:stop]

    def clients(self, start: int, stop: int) -> "SplitData":
        """The split of clients start … stop - 1 only (a contiguous shard)."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        return SplitData(self.x[lo:hi], self.y[lo:hi], self.offsets[start:stop + 1] - lo,
                         {k: v[lo:hi] for k, v in self.extra.items()})

    def with_extra(self, **extra: Tensor) -> "SplitData":
        """A copy carrying more per-sample fields (e.g. teacher logits)."""
        return SplitData(self.x, self.y, self.offsets, {**self.extra, **extra})

    def to(self, device: torch.device) -> "SplitData":
        """Move every tensor to `device`."""
        return SplitData(self.x.to(device), self.y.to(device), self.offsets.to(device),
                         {k: v.to(device) for k, v in self.extra.items()})


@dataclass
class FederatedData:
    """The train, val and test splits of every client.

    A shard of a federation (`shard`) holds clients `first_client` … of the whole one, which
    has `whole_clients` clients: its clients' random draws are keyed by those ids
    (`client_id`), so a client trains alike whichever shard holds it.
    """

    train: SplitData
    val: SplitData
    test: SplitData
    first_client: int = 0
    whole_clients: int | None = None   # None: this data is the whole federation

    def client_id(self, position: int) -> int:
        """The federation-wide id of the client at `position` of this data."""
        return self.first_client + int(position)

    def shard(self, start: int, stop: int) -> "FederatedData":
        """Clients start … stop - 1 of this data, keeping their federation-wide ids."""
        return FederatedData(*(self.split(name).clients(start, stop)
                               for name in ("train", "val", "test")),
                             first_client=self.first_client + start,
                             whole_clients=self.whole_clients or self.n_clients)

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self.train.n_clients

    def split(self, name: str) -> SplitData:
        """The split called `name`."""
        return {"train": self.train, "val": self.val, "test": self.test}[name]

    def to(self, device: torch.device) -> "FederatedData":
        """Move every split to `device`."""
        return FederatedData(self.train.to(device), self.val.to(device), self.test.to(device),
                             self.first_client, self.whole_clients)


def steps_for_epochs(counts: Tensor, batch_size: int, epochs: int, batches_per_step: int = 1
                     ) -> Tensor:
    """Optimizer steps for `epochs` passes over each client's data (last batch may be short)."""
    batches = (counts + batch_size - 1) // batch_size
    return (batches * epochs + batches_per_step - 1) // batches_per_step


def member_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (seed, round, client, phase …)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0]
               >> np.uint64(1))


def schedule(n: int, steps: int, batch_size: int, seed: int, batches_per_step: int = 1) -> Tensor:
    """Local sample indices of each mini-batch: [steps, batches_per_step, batch_size], -1 padded.

    Each epoch is a fresh permutation of the client's n samples cut into ceil(n / B) batches, the
    last one short; epochs follow one another until `steps × batches_per_step` batches are drawn.
    When one batch holds all n samples (full-batch gradient descent) the samples keep their order:
    a permutation would change only the order of a sum.
    """
    out = torch.full((steps * batches_per_step * batch_size,), -1, dtype=torch.long)
    write_schedule(out, n, steps * batches_per_step, batch_size, seed)
    return out.view(steps, batches_per_step, batch_size)


def write_schedule(out: Tensor, n: int, batches: int, batch_size: int, seed: int) -> None:
    """Write `schedule`'s first `batches` batches, flat, into `out` (filled with -1 beforehand).

    Epoch e fills out[e·⌈n/B⌉·B:][:n] with its permutation (the padding of its short last batch
    stays -1), so a trainer writes every member's schedule straight into its index table.
    """
    limit = batches * batch_size
    if n <= batch_size:
        out[:limit].view(batches, batch_size)[:, :n] = torch.arange(n)
        return
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, limit, math.ceil(n / batch_size) * batch_size):
        stop = min(start + n, limit)
        out[start:stop] = torch.randperm(n, generator=generator)[:stop - start]
