"""Train many models ("members") at once, or one after another with the same result.

A :class:`Job` says what to train: a stacked state tree, which groups are trained, the objective
of one member, whose data each member reads, how many steps and at which learning rate.

:class:`BatchedTrainer` runs one step of every active member as a single computation: the
objective is vectorised with ``torch.func.vmap`` over the members' state and mini-batches, one
``autograd.grad`` of the summed losses gives every member its own gradient (members share no
parameters), and a stacked optimizer updates them in place. Members are sorted by step count so
the active ones form a prefix: a client with 10 samples stops after its own steps instead of
being padded to the largest client's; only a client's last, short batch is padded and masked.

:class:`SequentialTrainer` is the reference: a plain loop per member with ``torch.optim``.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from pflpipe.engine.data import SplitData, schedule, write_schedule
from pflpipe.engine.noise import normal, step_keys
from pflpipe.engine.optim import OptimizerConfig, StackedOptimizer
from pflpipe.engine.tree import Tree, member, select, tree_map

log = logging.getLogger(__name__)

Batch = dict[str, Tensor]
Objective = Callable[..., "Tensor | tuple[Tensor, Tree]"]


@dataclass
class Context:
    """What every objective may call: the forward passes, the task loss and engine noise."""

    model: nn.Module
    task: str = "classification"
    modules: dict[str, nn.Module] = field(default_factory=dict)  # an algorithm's extra networks

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Model output for inputs `x` with parameters `params`."""
        return functional_call(self.model, params, (x,))

    def call(self, name: str, params: dict[str, Tensor], *args: Tensor) -> Tensor:
        """Output of the extra network `name` (an algorithm's `modules`) with `params`."""
        return functional_call(self.modules[name], params, args)

    def normal(self, key: Tensor, shape: tuple[int, ...], salt: int = 0) -> Tensor:
        """Standard normal noise from a member's `key` (``batch["key"]`` in objectives)."""
        return normal(key, tuple(shape), salt)

    def loss(self, output: Tensor, batch: Batch) -> Tensor:
        """Mean task loss over the batch's real (unmasked) samples."""
        if self.task == "regression":
            per_sample = (output.squeeze(-1) - batch["y"]) ** 2
        else:
            per_sample = cross_entropy(output, batch["y"])
        return self.mean(per_sample, batch)

    def mean(self, per_sample: Tensor, batch: Batch) -> Tensor:
        """Mean of per-sample losses [B] over the batch's real samples.

        Every network pass an objective takes over a mini-batch ends here (`loss`, PersFL's
        distillation loss): the engine counts the samples processed from these calls
        (`pflpipe.engine.accounting.passes`).
        """
        mask = batch["mask"]
        return (per_sample * mask).sum() / mask.sum().clamp_min(1.0)

    def task_loss(self, params: dict[str, Tensor], batch: Batch) -> Tensor:
        """Task loss of `params` on `batch` (cross-entropy, or squared error for regression)."""
        return self.loss(self.forward(params, batch["x"]), batch)


def cross_entropy(output: Tensor, target: Tensor) -> Tensor:
    """Per-sample cross-entropy, F.cross_entropy(..., reduction="none") to the bit.

    Under vmap, F.cross_entropy runs a Python decomposition (and imports sympy, a second of a
    stage's start-up); log_softmax and gather have native batching rules.
    """
    return -torch.log_softmax(output, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)


def sub_batch(batch: Batch, index: int) -> Batch:
    """The `index`-th mini-batch of a step that draws several (Per-FedAvg draws 2 or 3)."""
    return {name: value if name == "key" else value[index] for name, value in batch.items()}


@dataclass
class Job:
    """One training call: every member trains `train` groups of `state` on its client's data."""

    state: Tree                       # stacked [M, ...]
    train: tuple[str, ...]            # groups that receive gradients
    objective: Objective              # objective(state, batch, shared, hp, ctx) for ONE member
    data: SplitData
    clients: Tensor                   # [M] int64: the client whose samples member m reads
    steps: Tensor                     # [M] int64: optimizer steps of member m
    lr: dict[str, Tensor]             # group -> [M] learning rates
    batch_size: int
    seeds: list[int]                  # [M] seeds of the members' mini-batch order and noise
    shared: Tree = field(default_factory=dict)   # the same for every member (e.g. global model)
    hp: dict[str, Tensor] = field(default_factory=dict)   # per-member scalars [M] (λ, T, …)
    batches_per_step: int = 1
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    #: [M] local indices of the samples member m trains on (a part of its client's); all if None
    samples: list[Tensor] | None = None
    #: (objective, groups) updates that follow `objective`'s on the same mini-batch each step,
    #: each with its own optimizer (alternating steps); the reported loss is `objective`'s
    then: tuple[tuple[Objective, tuple[str, ...]], ...] = ()

    @property
    def updates(self) -> tuple[tuple[Objective, tuple[str, ...]], ...]:
        """Every (objective, groups) update of one step, in order."""
        return ((self.objective, self.train), *self.then)

    @property
    def members(self) -> int:
        """Number of members."""
        return len(self.clients)


@dataclass
class TrainResult:
    """The trained state and, per member, the mean loss and the first non-finite step."""

    state: Tree
    loss: Tensor       # [M] mean objective over the member's steps
    bad_step: Tensor   # [M] first step whose loss was NaN or infinite; -1 when none was


def _as_pair(output) -> tuple[Tensor, Tree]:
    return output if isinstance(output, tuple) else (output, {})


class BatchedTrainer:
    """Steps every active member in one vectorised computation."""

    def __init__(self, ctx: Context, max_members: int | None = None):
        self.ctx, self.max_members = ctx, max_members

    def train(self, job: Job) -> TrainResult:
        """Run the job; members keep their order in the result."""
        size = self.max_members or job.members
        if job.members <= size:
            return self._train(job)
        parts = [self._train(chunk(job, start, start + size))
                 for start in range(0, job.members, size)]
        return TrainResult(
            {g: {k: torch.cat([p.state[g][k] for p in parts]) for k in parts[0].state[g]}
             for g in parts[0].state},
            torch.cat([p.loss for p in parts]), torch.cat([p.bad_step for p in parts]))

    def _train(self, job: Job) -> TrainResult:
        order = torch.argsort(job.steps.cpu(), descending=True, stable=True)
        device = job.data.x.device
        sorted_steps = job.steps.cpu()[order]
        max_steps = int(sorted_steps[0]) if job.members else 0
        state = select(job.state, order.to(device))  # a copy: the job's tensors stay untouched
        clients = job.clients.to(device)[order.to(device)]
        hp = {name: value.to(device)[order.to(device)] for name, value in job.hp.items()}
        index = index_table(job, order, max_steps).to(device)
        noise_keys = step_keys([job.seeds[m] for m in order.tolist()], max_steps).to(device)
        parts = []   # per update: (step function, trained (group, key)s, its optimizer)
        for objective, train in job.updates:
            keys = [(g, k) for g in train for k in state[g]]
            lrs = [job.lr[g].to(device)[order.to(device)] for g, _ in keys]
            parts.append((vmap(self._member_fn(objective), in_dims=(0, 0, None, 0)), train, keys,
                          StackedOptimizer(job.optimizer, [state[g][k] for g, k in keys], lrs)))
        total = torch.zeros(job.members, device=device)
        bad = torch.full((job.members,), -1, dtype=torch.long, device=device)
        # at step s the members with more than s steps are active: a prefix of the sorted order
        active = (sorted_steps.unsqueeze(0) > torch.arange(max_steps).unsqueeze(1)).sum(1).tolist()
        for step, k in enumerate(active):
            batch = {**self.gather(job, index[:k, step], clients[:k]), "key": noise_keys[:k, step]}
            hp_k = {n: v[:k] for n, v in hp.items()}
            for part, (step_fn, train, keys, optimizer) in enumerate(parts):
                losses = self._update(state, k, batch, job.shared, hp_k, step_fn, train, keys,
                                      optimizer, step)
                if part == 0:
                    total[:k] += losses
                bad[:k] = torch.where((bad[:k] < 0) & ~torch.isfinite(losses), step, bad[:k])
        mean = total / sorted_steps.clamp_min(1).to(device)
        if torch.equal(order, torch.arange(job.members)):
            return TrainResult(state, mean, bad)
        inverse = torch.argsort(order).to(device)
        return TrainResult(select(state, inverse), mean[inverse], bad[inverse])

    @staticmethod
    def _update(state: Tree, k: int, batch: Batch, shared: Tree, hp: dict, step_fn,
                train: tuple[str, ...], keys: list, optimizer: StackedOptimizer, step: int
                ) -> Tensor:
        """One optimizer step of the first `k` members on `train`; return their losses [k]."""
        view = {g: {key: t[:k].detach().requires_grad_(g in train)
                    for key, t in group.items()} for g, group in state.items()}
        losses, updates = step_fn(view, batch, shared, hp)
        leaves = [view[g][key] for g, key in keys]
        if leaves:   # a group can be empty (FedRep's representation under a linear model)
            grads = torch.autograd.grad(losses.sum(), leaves, allow_unused=True)
            grads = [torch.zeros_like(leaf) if g is None else g
                     for leaf, g in zip(leaves, grads, strict=True)]
            optimizer.step(k, grads, step)
        with torch.no_grad():
            for g, group in updates.items():
                for key, value in group.items():
                    state[g][key][:k].copy_(value)
        return losses.detach()

    @staticmethod
    def gather(job: Job, local: Tensor, clients: Tensor) -> Batch:
        """Gather the mini-batches [k, (batches_per_step,) B, ...] of the k active members."""
        return gather(job.data, local, clients, job.batches_per_step)

    def _member_fn(self, objective: Objective):
        ctx = self.ctx

        def one_member(state, batch, shared, hp):
            return _as_pair(objective(state, batch, shared, hp, ctx))

        return one_member


def gather(data: SplitData, local: Tensor, clients: Tensor, batches_per_step: int) -> Batch:
    """Mini-batches [k, (batches_per_step,) B, ...] of k members.

    Member i reads client `clients[i]` at its local sample indices `local[i]`
    [batches_per_step, B] (-1: padding, masked out).
    """
    # clamped: a compiled step also gathers for padded members, whose client may have no rows
    rows = (data.offsets[clients].view(-1, 1, 1) + local.clamp_min(0)).clamp_max(len(data.y) - 1)
    batch = {"x": data.x[rows], "y": data.y[rows], "mask": (local >= 0).float()}
    batch.update({name: value[rows] for name, value in data.extra.items()})
    if batches_per_step == 1:
        batch = {name: value.squeeze(1) for name, value in batch.items()}
    return batch


def index_table(job: Job, order: Tensor, max_steps: int) -> Tensor:
    """Local sample indices [M, S_max, batches_per_step, B] of every member's steps, -1 padded."""
    counts = job.data.counts.cpu()[job.clients.cpu()].tolist()
    steps = job.steps.tolist()
    table = torch.full((job.members, max_steps, job.batches_per_step, job.batch_size), -1,
                       dtype=torch.long)
    flat = table.view(job.members, -1)
    for row, m in enumerate(order.tolist()):
        if job.samples is None:   # written in place: no per-member tensor to copy
            write_schedule(flat[row], counts[m], steps[m] * job.batches_per_step,
                           job.batch_size, job.seeds[m])
        else:
            table[row, :steps[m]] = member_schedule(job, m, counts[m])
    return table


def member_schedule(job: Job, m: int, n: int) -> Tensor:
    """Member m's local sample indices [steps, batches_per_step, B] among its client's n samples.

    With `job.samples`, the schedule runs over member m's part and maps back into the client's.
    """
    samples = None if job.samples is None else job.samples[m]
    local = schedule(n if samples is None else len(samples), int(job.steps[m]), job.batch_size,
                     job.seeds[m], job.batches_per_step)
    if samples is None:
        return local
    return torch.where(local >= 0, samples.cpu()[local.clamp_min(0)], local)


def chunk(job: Job, start: int, stop: int) -> Job:
    """Members start..stop of `job` as a job of their own."""
    sl = slice(start, stop)
    return Job(
        state=tree_map(lambda t: t[sl], job.state), train=job.train, objective=job.objective,
        data=job.data, clients=job.clients[sl], steps=job.steps[sl],
        lr={g: v[sl] for g, v in job.lr.items()}, batch_size=job.batch_size,
        seeds=job.seeds[sl], shared=job.shared, hp={n: v[sl] for n, v in job.hp.items()},
        batches_per_step=job.batches_per_step, optimizer=job.optimizer,
        samples=None if job.samples is None else job.samples[sl], then=job.then)


class SequentialTrainer:
    """The reference: for each member, a plain PyTorch loop with torch.optim."""

    def __init__(self, ctx: Context, max_members: int | None = None):
        self.ctx = ctx

    def train(self, job: Job) -> TrainResult:
        """Run the job member by member."""
        device = job.data.x.device
        out = tree_map(lambda t: t.clone(), job.state)
        losses = torch.zeros(job.members, device=device)
        bad = torch.full((job.members,), -1, dtype=torch.long, device=device)
        for m in range(job.members):
            state, loss, bad_step = self._train_member(job, m)
            with torch.no_grad():
                for g, group in state.items():
                    for key, value in group.items():
                        out[g][key][m] = value
            losses[m], bad[m] = loss, bad_step
        return TrainResult(out, losses, bad)

    def _train_member(self, job: Job, m: int) -> tuple[Tree, float, int]:
        state = {g: {k: v.detach().clone() for k, v in grp.items()}
                 for g, grp in member(job.state, m).items()}
        optimizers = [job.optimizer.torch_optimizer(
            [{"params": list(state[g].values()), "lr": float(job.lr[g][m])} for g in train])
            if any(state[g] for g in train) else None for _, train in job.updates]
        client = int(job.clients[m])
        x, y = job.data.client(client)
        extra = {name: value[job.data.offsets[client]:job.data.offsets[client + 1]]
                 for name, value in job.data.extra.items()}
        steps = int(job.steps[m])
        order = member_schedule(job, m, len(y))
        hp = {name: value[m] for name, value in job.hp.items()}
        noise_keys = step_keys([job.seeds[m]], steps)[0].to(x.device)
        total, bad_step = 0.0, -1
        for step in range(steps):
            batch = {**_plain_batch(order[step], x, y, extra, job.batches_per_step),
                     "key": noise_keys[step]}
            for part, ((objective, train), optimizer) in enumerate(
                    zip(job.updates, optimizers, strict=True)):
                loss = self._update(state, batch, job.shared, hp, objective, train, optimizer)
                total += float(loss) if part == 0 else 0.0
                if bad_step < 0 and not torch.isfinite(loss):
                    bad_step = step
        return tree_map(torch.Tensor.detach, state), total / max(steps, 1), bad_step

    def _update(self, state: Tree, batch: Batch, shared: Tree, hp: dict, objective: Objective,
                train: tuple[str, ...], optimizer: torch.optim.Optimizer | None) -> Tensor:
        """One optimizer step of `objective` on the groups `train`; return the loss."""
        for g, group in state.items():
            for value in group.values():
                value.requires_grad_(g in train)
        loss, updates = _as_pair(objective(state, batch, shared, hp, self.ctx))
        if optimizer is not None:   # None: the trained groups are empty
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for g, group in updates.items():
                for key, value in group.items():
                    state[g][key].copy_(value)
        return loss.detach()


def _plain_batch(local: Tensor, x: Tensor, y: Tensor, extra: dict[str, Tensor],
                 batches_per_step: int) -> Batch:
    """A step's mini-batch: only the real samples when one batch is drawn, else padded+masked."""
    if batches_per_step == 1:
        ids = local[0][local[0] >= 0].to(x.device)
        batch = {"x": x[ids], "y": y[ids], "mask": torch.ones(len(ids), device=x.device)}
        batch.update({name: value[ids] for name, value in extra.items()})
        return batch
    ids = local.clamp_min(0).to(x.device)
    batch = {"x": x[ids], "y": y[ids], "mask": (local >= 0).float().to(x.device)}
    batch.update({name: value[ids] for name, value in extra.items()})
    return batch


def make_trainer(mode: str, ctx: Context, max_members: int | None = None, compile: bool = False):
    """The trainer the spec's `engine.mode` names (`compile`: the batched one's steps compiled)."""
    if mode == "batched" and compile:
        from pflpipe.engine.compiled import CompiledTrainer

        return CompiledTrainer(ctx, max_members)
    return (BatchedTrainer if mode == "batched" else SequentialTrainer)(ctx, max_members)
