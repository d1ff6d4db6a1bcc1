"""What a round cost each client, counted from what the engine ran (`pflpipe.engine.records`).

- ``steps``: the optimizer updates of every training phase, from the step counts the trainer ran
  (after the algorithm's `schedule`); a phase whose steps also run `then` updates counts each;
- ``samples``: the samples processed: for every update of every step, each network pass its
  objective makes over one of the step's mini-batches counts that mini-batch's real (unpadded)
  samples once — a pass is a forward pass and the backward pass of its gradient, and ends in
  `Context.mean` (the task loss, PersFL's distillation loss). So FedAvg counts each mini-batch
  once, pFedMe K times (its K inner steps), an objective averaging K Monte-Carlo draws K times,
  APFL twice (three times with adaptive α), Per-FedAvg each of its 2 or 3 mini-batches (the
  Hessian-free variant's third twice). The passes are measured (`passes`), the mini-batches'
  real samples come from the schedule both trainers draw (`batch_samples`);
- ``bytes_sent``: what the server step read of a client's state: its ``model`` payload keys
  (`is_payload`) and every other group it read (SCAFFOLD's Δc_i, pFedVEM's τ_j and head mean);
- ``bytes_received``: what a client is handed each round: the global model's keys the server step
  maintains (the ones it returns) and the server state the client hooks are given (SCAFFOLD's c,
  Flow's router);
- ``adaptation_steps``, ``adaptation_samples``: the same two counts of the training done before
  scoring (`eval_phases`: Per-FedAvg's adaptation, Flow's re-personalization), at every
  evaluation, on the evaluation's ``test`` records.

Forward-only passes (scoring, a teacher's logits) are not counted.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

import torch
from torch import Tensor
from torch.func import vmap

from pflpipe.engine.data import SplitData
from pflpipe.engine.noise import step_keys
from pflpipe.engine.protocol import AlgorithmProtocol, Round, overridden
from pflpipe.engine.records import ADAPTATION, diagnostic_column
from pflpipe.engine.trainer import Context, Job, gather
from pflpipe.engine.tree import Tree, member


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


def batch_samples(counts: Tensor, steps: Tensor, batch_size: int, batches_per_step: int = 1
                  ) -> Tensor:
    """Real samples of each member's j-th mini-batch of a step, summed over its steps [M, bps].

    Batch b of the schedule (step b // bps, draw b % bps) holds B samples but the last of each
    epoch, which holds n − (⌈n / B⌉ − 1)·B (`pflpipe.engine.data.write_schedule`).

    >>> batch_samples(torch.tensor([10, 3]), torch.tensor([2, 1]), 4, 2).tolist()
    [[6, 8], [3, 3]]
    >>> batch_samples(torch.tensor([10, 10, 3, 0]), torch.tensor([3, 5, 2, 4]), 4).flatten()
    tensor([10, 18,  6,  0])
    """
    counts, steps = counts.long().cpu(), steps.long().cpu()
    per_epoch = ((counts + batch_size - 1) // batch_size).clamp_min(1)[:, None, None]
    last = (counts[:, None, None] - (per_epoch - 1) * batch_size)
    step = torch.arange(int(steps.max()) if len(steps) else 0)[None, :, None]
    batch = step * batches_per_step + torch.arange(batches_per_step)[None, None, :]
    size = torch.where(batch % per_epoch == per_epoch - 1, last, batch_size)
    size = torch.where(step < steps[:, None, None], size, 0).sum(1)
    return torch.where(counts[:, None] > 0, size, 0)


@dataclass
class _Counting(Context):
    """A context that notes the real samples of every `mean` an objective takes."""

    seen: list[int] = field(default_factory=list)

    def mean(self, per_sample: Tensor, batch) -> Tensor:
        """The context's mean; notes how many real samples it averaged."""
        self.seen.append(int(batch["mask"].sum()))
        return super().mean(per_sample, batch)


def passes(ctx: Context, job: Job) -> list[list[int]]:
    """Per update of a step (`Job.updates`): its network passes over each mini-batch [U][bps].

    Measured, not declared: each update's objective runs once, for member 0, on a probe step
    whose j-th mini-batch holds 2^j real samples; every `Context.mean` it takes is one pass over
    the mini-batches whose sizes sum to the samples it averaged (so a loss must average whole
    mini-batches, as every objective does). Objectives branch on no tensor value, so every step
    of every member makes the same passes.
    """
    draws = job.batches_per_step
    if not job.members or not len(job.data.y):
        return [[0] * draws for _ in job.updates]
    device = job.data.x.device
    local = torch.full((1, draws, 2 ** (draws - 1)), -1, dtype=torch.long)
    for j in range(draws):
        local[0, j, :2 ** j] = 0
    batch = {k: v[0] for k, v in gather(job.data, local.to(device), job.clients[:1].to(device),
                                        draws).items()}
    batch["key"] = step_keys(job.seeds[:1], 1).to(device)[0, 0]
    state, hp = member(job.state, 0), {name: value[0] for name, value in job.hp.items()}
    counting = _Counting(**{f.name: getattr(ctx, f.name) for f in fields(Context)})
    out = []
    for objective, _ in job.updates:
        counting.seen.clear()
        objective(state, batch, job.shared, hp, counting)
        if any(not 0 < n < 2 ** draws for n in counting.seen):
            raise RuntimeError(f"{getattr(objective, '__name__', objective)}: a loss averaged "
                               "samples that are no union of the step's mini-batches (none, or "
                               "more); the engine cannot count its passes")
        out.append([sum(n >> j & 1 for n in counting.seen) for j in range(draws)])
    return out


def job_compute(ctx: Context, job: Job) -> tuple[Tensor, Tensor]:
    """The optimizer updates [M] and the samples processed [M] of a training job."""
    if job.samples is None:
        counts = job.data.counts.cpu()[job.clients.cpu()]
    else:
        counts = torch.tensor([len(s) for s in job.samples], dtype=torch.long)
    steps = job.steps.long().cpu()
    per_batch = batch_samples(counts, steps, job.batch_size, job.batches_per_step)
    made = torch.tensor(passes(ctx, job), dtype=torch.long).reshape(-1, job.batches_per_step)
    return steps * len(job.updates), (per_batch @ made.T).sum(1)


class Tally:
    """The steps and samples of a round's clients [C], added phase by phase."""

    def __init__(self, members: int):
        self.steps = torch.zeros(members, dtype=torch.long)
        self.samples = torch.zeros(members, dtype=torch.long)

    def add(self, ctx: Context, job: Job) -> None:
        """Count a phase's training job (`job_compute`)."""
        steps, samples = job_compute(ctx, job)
        self.steps += steps
        self.samples += samples


def mark_adaptation(rows: list[dict], clients: Tensor, tally: Tally) -> None:
    """Put the training done before an evaluation's scoring on its ``test`` records."""
    position = {c: i for i, c in enumerate(clients.tolist())}
    for row in rows:
        if row["split"] == "test":
            i = position[row["client"]]
            row.update(zip(ADAPTATION, (int(tally.steps[i]), int(tally.samples[i])), strict=True))


def sent_bytes(state: Tree, groups: Iterable[str], is_payload) -> int:
    """Bytes one client uploads: the `groups` the server step read, ``model`` its payload keys."""
    return sum(member_bytes(state[g], [k for k in state[g] if is_payload(k)]
                            if g == "model" else None) for g in groups)


def received_bytes(new_global: Mapping[str, Tensor], server: Tree) -> int:
    """Bytes one client downloads: the global keys the server step maintains, the server state."""
    return tree_bytes(new_global) + tree_bytes(server)


#: The most training samples per client the `diagnostics` hook is given (all of a digits or
#: CIFAR client's; the first ones of a larger client).
DIAGNOSTIC_SAMPLES = 512


def probe_batch(data: SplitData, clients: Tensor, limit: int = DIAGNOSTIC_SAMPLES
                ) -> dict[str, Tensor]:
    """Each client's first (at most `limit`) training samples as a masked batch [C, B, ...]."""
    counts = data.counts[clients.to(data.offsets.device)].cpu()
    size = max(1, min(limit, int(counts.max()) if len(counts) else 1))
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
        batch = probe_batch(data, trained.clients)
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
