"""What a round cost each client, counted from what the engine ran (`pflpipe.engine.records`).

- ``steps``: the optimizer updates of every training phase, from the step counts the trainer ran
  (after the algorithm's `schedule`); a phase whose steps also run `then` updates counts each;
- ``samples``: the real (unpadded) samples of those updates' mini-batches, from the schedule both
  trainers draw (`scheduled_samples`), once per update: a sample through an objective's forward
  and backward pass. Passes an objective makes inside itself (pFedMe's inner steps, Monte-Carlo
  draws) are not multiplied in;
- ``bytes_sent``: what the server step read of a client's state: its ``model`` payload keys
  (`is_payload`) and every other group it read (SCAFFOLD's Δc_i, pFedVEM's τ_j and head mean);
- ``bytes_received``: what a client is handed each round: the global model's keys the server step
  maintains (the ones it returns) and the server state the client hooks are given (SCAFFOLD's c,
  Flow's router).

Training done before scoring (`eval_phases`) is not counted.
"""

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor
from torch.func import vmap

from pflpipe.engine.data import SplitData
from pflpipe.engine.protocol import AlgorithmProtocol, Round, overridden
from pflpipe.engine.records import diagnostic_column
from pflpipe.engine.trainer import gather
from pflpipe.engine.tree import Tree


def scheduled_samples(counts: Tensor, batches: Tensor, batch_size: int) -> Tensor:
    """Real samples in each member's first `batches` mini-batches of its schedule [M].

    An epoch of n samples is ⌈n / B⌉ batches holding n samples (the last one short); one batch
    holds all n when n ≤ B (`pflpipe.engine.data.write_schedule`).

    >>> scheduled_samples(torch.tensor([10, 10, 3, 0]), torch.tensor([3, 5, 2, 4]), 4)
    tensor([10, 18,  6,  0])
    """
    counts, batches = counts.long().cpu(), batches.long().cpu()
    per_epoch = (counts + batch_size - 1) // batch_size
    epochs = batches // per_epoch.clamp_min(1)
    rest = batches - epochs * per_epoch.clamp_min(1)
    return torch.where(counts > 0, epochs * counts + torch.minimum(rest * batch_size, counts), 0)


def member_bytes(group: Mapping[str, Tensor], keys: Iterable[str] | None = None) -> int:
    """Bytes of one member's copy of a stacked group [M, ...] (only `keys` when given)."""
    keys = group.keys() if keys is None else keys
    return sum(group[k][0].numel() * group[k].element_size() for k in keys if len(group[k]))


def tree_bytes(tree: Mapping) -> int:
    """Bytes of every tensor in a (nested) mapping of tensors, e.g. a server state."""
    return sum(value.numel() * value.element_size() if isinstance(value, Tensor)
               else tree_bytes(value) for value in tree.values())


class Reads(dict):
    """A round's client states that remember which groups the server step read.

    Reading a group by name marks it; iterating the groups marks them all.
    """

    def __init__(self, tree: Tree):
        super().__init__(tree)
        self.read: set[str] = set()

    def __getitem__(self, group: str):
        self.read.add(group)
        return super().__getitem__(group)

    def get(self, group: str, default=None):
        """The group, marked as read (when there is one)."""
        if group in self:
            self.read.add(group)
        return super().get(group, default)

    def __iter__(self):
        self.read.update(super().keys())
        return super().__iter__()

    def items(self):
        """Every group, each marked as read."""
        self.read.update(super().keys())
        return super().items()

    def values(self):
        """Every group, each marked as read."""
        self.read.update(super().keys())
        return super().values()


class Tally:
    """The steps and samples of a round's clients [C], added phase by phase."""

    def __init__(self, members: int):
        self.steps = torch.zeros(members, dtype=torch.long)
        self.samples = torch.zeros(members, dtype=torch.long)

    def add(self, steps: Tensor, counts: Tensor, batch_size: int, batches_per_step: int,
            updates: int) -> None:
        """Count a phase: each member's `steps` over `counts` samples, `updates` per step."""
        steps = steps.long().cpu()
        self.steps += steps * updates
        self.samples += scheduled_samples(counts, steps * batches_per_step, batch_size) * updates


def sent_bytes(state: Tree, groups: Iterable[str], is_payload) -> int:
    """Bytes one client uploads: the `groups` the server step read, ``model`` its payload keys."""
    return sum(member_bytes(state[g], [k for k in state[g] if is_payload(k)]
                            if g == "model" else None) for g in groups)


def received_bytes(new_global: Mapping[str, Tensor], server: Tree) -> int:
    """Bytes one client downloads: the global keys the server step maintains, the server state."""
    return tree_bytes(new_global) + tree_bytes(server)


def probe_batch(data: SplitData, clients: Tensor, batch_size: int) -> dict[str, Tensor]:
    """Each client's first (at most `batch_size`) samples as a masked batch [C, B, ...]."""
    counts = data.counts[clients.to(data.offsets.device)].cpu()
    size = max(1, min(batch_size, int(counts.max()) if len(counts) else 1))
    local = torch.arange(size).expand(len(clients), size)
    local = torch.where(local < counts.unsqueeze(1), local, -1).unsqueeze(1)
    return gather(data, local.to(data.x.device), clients.to(data.x.device), 1)


def diagnostics(algorithm: AlgorithmProtocol, ctx, data: SplitData, plan, trained: Round,
                shared: Tree, server: Tree) -> dict[str, Tensor]:
    """The algorithm's diagnostics of a round's clients [C, ...] (its two hooks, when defined).

    `trained` is the round with the clients' states after local training, `shared` what the
    round started from, `server` the server state the server step returned.
    """
    out = {}
    if overridden(algorithm, "diagnostics"):
        batch = probe_batch(data, trained.clients, plan.batch_size)
        out |= vmap(lambda s, b: algorithm.diagnostics(s, shared, b, ctx))(trained.states, batch)
    if overridden(algorithm, "server_diagnostics"):
        out |= algorithm.server_diagnostics(trained, server)
    return out


def record(algorithm: AlgorithmProtocol, ctx, data: SplitData, plan, trained: Round, shared: Tree,
           server: Tree, new_global: Mapping[str, Tensor], read: set[str], tally: Tally,
           losses: list[Tensor]) -> list[dict]:
    """The train rows of a round whose server step `read` those groups and returned those keys.

    `losses` are the mean losses of each phase [C] (the first is reported).
    """
    return train_rows(trained.index, trained.clients.tolist(), losses[0] if losses else None,
                      tally, sent_bytes(trained.states, read, algorithm.is_payload),
                      received_bytes(new_global, shared["server"]),
                      diagnostics(algorithm, ctx, data, plan, trained, shared, server))


def train_rows(round_idx: int, clients: list[int], loss: Tensor | None, tally: Tally,
               sent: int, received: int, diagnostics: Mapping[str, Tensor]) -> list[dict]:
    """The engine's ``train`` rows of a round: per client its loss, compute and diagnostics.

    A diagnostic [C] is one column, one of [C, ...] one column per entry (``name.i``).
    """
    columns: dict[str, list[float]] = {}
    for name, value in diagnostics.items():
        value = value.detach().double().cpu().reshape(len(clients), -1)
        if value.shape[1] == 1 and diagnostics[name].dim() == 1:
            columns[diagnostic_column(name)] = value[:, 0].tolist()
        else:
            columns.update({diagnostic_column(f"{name}.{i}"): value[:, i].tolist()
                            for i in range(value.shape[1])})
    losses = [None] * len(clients) if loss is None else loss.tolist()
    return [{"round": round_idx, "client": c, "split": "train", "loss": losses[i],
             "steps": int(tally.steps[i]), "samples": int(tally.samples[i]),
             "bytes_sent": sent, "bytes_received": received,
             **{name: values[i] for name, values in columns.items()}}
            for i, c in enumerate(clients)]
