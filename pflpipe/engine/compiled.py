"""`engine.compile`: each batched step as one compiled graph.

:class:`CompiledTrainer` is the :class:`~pflpipe.engine.trainer.BatchedTrainer` with each step —
gather the members' mini-batches, the vmapped objective and its gradient
(``vmap(grad(objective))``), the optimizer update, the objective's own updates and the loss
bookkeeping — traced by ``torch.compile`` into one graph (``fullgraph=True``), so a step costs one
call instead of hundreds of small eager operations.

- **Skewed clients.** Members finish at different steps: a step of ``k`` active members runs
  on exactly those ``k`` (the member dimension of the graph is dynamic, so one graph serves
  every ``k``), never on members padded up to a fixed size — a round of very unequal clients
  costs their real steps, and compiles once. A lone last member steps beside one padded member
  (the compiler would specialise a size-1 dimension into a second graph); a padded member steps
  at learning rate 0 with gradient 0 and keeps its parameters.
- **Cache.** Compiled graphs are kept on disk (inductor's FX graph and AOTAutograd caches) in
  ``$TORCHINDUCTOR_CACHE_DIR`` when set, else in ``~/.cache/pflpipe/torch-compile``
  (``$XDG_CACHE_HOME/pflpipe/torch-compile``), which every stage process shares, and later runs
  too: a process then only traces, it does not compile C++/Triton code again.
- **Fallback.** A step that does not compile (an operation the compiler does not support, no C++
  compiler) is logged with the reason; that job's remaining steps run the same step function
  eagerly, and later jobs of the objective run on the BatchedTrainer: the same result up to
  rounding.
"""

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torch.func import grad, vmap

from pflpipe.engine.noise import step_keys
from pflpipe.engine.optim import StackedOptimizer, update
from pflpipe.engine.trainer import (
    BatchedTrainer,
    Context,
    Job,
    Objective,
    TrainResult,
    gather,
    index_table,
)
from pflpipe.engine.tree import Tree, select

log = logging.getLogger(__name__)
#: Graphs one process may compile for the engine's step (dynamo's default, 8, is too few).
RECOMPILE_LIMIT = 256
#: `engine.compile: auto` compiles a stage that takes at least this many batched steps (rounds ×
#: local epochs × batches of the largest client): compiling costs seconds per graph, a compiled
#: step saves a fraction of a millisecond (docs/performance.md has the measurements).
AUTO_MIN_STEPS = {"cpu": 20_000, "cuda": 5_000}


def pays_off(device: torch.device, steps: int) -> bool:
    """`engine.compile: auto`: whether compiling a stage of `steps` batched steps pays off."""
    return steps >= AUTO_MIN_STEPS.get(device.type, AUTO_MIN_STEPS["cpu"])


def cache_dir() -> Path:
    """Where compiled graphs are kept: $TORCHINDUCTOR_CACHE_DIR, else the user's cache."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "pflpipe" / "torch-compile"


def bucket(k: int, members: int) -> int:
    """The member count a step of `k` active members runs with: `k`, at least 2 (≤ `members`).

    The member dimension of the step's graph is dynamic, so one graph serves every count; the
    compiler specialises a dimension of size 1, so a lone last member steps with one padded
    member beside it rather than compile a second graph.

    >>> [bucket(k, 10) for k in (10, 9, 3, 2, 1)]
    [10, 9, 3, 2, 2]
    >>> bucket(1, 1)
    1
    """
    return min(members, max(k, 2))


@dataclass
class Steps:
    """A job in the trainer's order (most steps first): the arguments of its step function."""

    state: Tree                # a sorted copy of the job's state [M, ...]
    buffers: list[dict[str, Tensor]]   # the optimizer's state
    lrs: list[Tensor]          # [M] per trained tensor
    hp: dict[str, Tensor]      # [M] each
    clients: Tensor            # [M]
    index: Tensor              # [S_max, M, batches_per_step, B] local sample indices, -1 padded
    noise: Tensor              # [S_max, M] noise keys
    active: Tensor             # [S_max, M] bool: member m takes step s
    total: Tensor              # [M] summed losses
    bad: Tensor                # [M] first non-finite step, -1 while none

    def args(self, job: Job, step: int, b: int, step_id: Tensor) -> tuple:
        """The step function's arguments for step `step`: views of the first `b` members."""
        args = ({g: {key: t[:b] for key, t in group.items()} for g, group in self.state.items()},
                [{name: t[:b] for name, t in buffer.items()} for buffer in self.buffers],
                [lr[:b] for lr in self.lrs], {name: v[:b] for name, v in self.hp.items()},
                job.shared, job.data, self.index[step, :b], self.clients[:b],
                self.noise[step, :b], self.total[:b], self.bad[:b], self.active[step, :b],
                step_id)
        for tensor in _member_tensors(args):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        return args


def _member_tensors(args: tuple) -> list[Tensor]:
    """The tensors of `Steps.args` whose first dimension is the member's."""
    state, buffers, lrs, hp, _shared, _data, *per_member, _step_id = args
    return [*(t for group in state.values() for t in group.values()),
            *(t for buffer in buffers for t in buffer.values()), *lrs, *hp.values(), *per_member]


def compile_options(device: torch.device) -> dict:
    """`torch.compile`'s options on `device`: CUDA graphs on CUDA ("reduce-overhead").

    A small model's step on a GPU costs the launch of its kernels, not their arithmetic: a CUDA
    graph replays the step's kernels in one launch. Inductor records one graph per member count
    and runs a step without one (logging why) where it cannot record it. Not measured on a GPU
    here (docs/performance.md).
    """
    return {"mode": "reduce-overhead"} if device.type == "cuda" else {}


class CompiledTrainer(BatchedTrainer):
    """The BatchedTrainer with each step one compiled graph (per objective and job layout).

    `on_compile(text)` is told what each compilation cost (a stage notes it); `compile_seconds`
    sums those costs.
    """

    def __init__(self, ctx: Context, max_members: int | None = None,
                 on_compile: Callable[[str], None] | None = None):
        super().__init__(ctx, max_members)
        # Here, not at the top: importing dynamo (and sympy) costs ~2 CPU s, which a stage that
        # does not compile must not pay (docs/performance.md, start-up).
        import torch._dynamo  # noqa: F401

        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir()))
        self._steps: dict[tuple, tuple] = {}   # key -> (eager step, compiled step or None)
        self.on_compile, self.compile_seconds = on_compile, 0.0

    def _train(self, job: Job) -> TrainResult:
        if job.then:   # updates that follow on the same batch (Flow): the eager step has them
            return super()._train(job)
        device = job.data.x.device
        key = (job.objective, job.train, job.batches_per_step, job.optimizer, device.type)
        if key not in self._steps:
            fn = _step_fn(self.ctx, *key[:-1])
            self._steps[key] = fn, torch.compile(fn, fullgraph=True, **compile_options(device))
        eager, compiled = self._steps[key]
        if compiled is None:
            return super()._train(job)
        order = torch.argsort(job.steps.cpu(), descending=True, stable=True)
        sorted_steps = job.steps.cpu()[order]
        run = _prepare(job, order, sorted_steps)
        step_ids = torch.arange(len(run.active), device=run.total.device)
        for step, k in enumerate(run.active.sum(1).tolist()):
            args = run.args(job, step, bucket(k, job.members), step_ids[step])
            if compiled is not None:
                compiled = self._compiled(key, compiled, args)
            if compiled is None:   # did not compile: this job's remaining steps run eagerly
                eager(*args)
        mean = run.total / sorted_steps.clamp_min(1).to(run.total.device)
        if torch.equal(order, torch.arange(job.members)):
            return TrainResult(run.state, mean, run.bad)
        inverse = torch.argsort(order).to(run.total.device)
        return TrainResult(select(run.state, inverse), mean[inverse], run.bad[inverse])

    def _compiled(self, key: tuple, compiled, args: tuple):
        """Run a compiled step; None (and logged, and remembered) when it does not compile."""
        from torch._dynamo.utils import counters

        graphs, start = counters["stats"]["unique_graphs"], time.perf_counter()
        try:
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT,
                                            accumulated_recompile_limit=RECOMPILE_LIMIT):
                compiled(*args)
        except torch._dynamo.exc.TorchDynamoException as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            log.warning("engine.compile: the step of %s did not compile (%s); it runs eagerly",
                        _name(key[0]), reason)
            self._steps[key] = self._steps[key][0], None
            return None
        if counters["stats"]["unique_graphs"] > graphs:   # this call compiled (or loaded) a graph
            self._compiled_in(key, time.perf_counter() - start, len(args[6]))
        return compiled

    def _compiled_in(self, key: tuple, seconds: float, members: int) -> None:
        """Log (and tell `on_compile`) what compiling the step of `key` cost."""
        self.compile_seconds += seconds
        text = (f"engine.compile: compiled the step of {_name(key[0])} ({members} members, "
                f"{key[-1]}) in {seconds:.1f} s")
        log.info(text)
        if self.on_compile is not None:
            self.on_compile(text)


def _prepare(job: Job, order: Tensor, sorted_steps: Tensor) -> Steps:
    device = job.data.x.device
    on_device = order.to(device)
    max_steps = int(sorted_steps[0]) if job.members else 0
    state = select(job.state, on_device)  # a copy: the job's tensors stay untouched
    keys = [(g, k) for g in job.train for k in state[g]]
    lrs = [job.lr[g].to(device)[on_device] for g, _ in keys]
    optimizer = StackedOptimizer(job.optimizer, [state[g][k] for g, k in keys], lrs)
    return Steps(
        state, optimizer.state, lrs,
        hp={name: value.to(device)[on_device] for name, value in job.hp.items()},
        clients=job.clients.to(device)[on_device],
        index=index_table(job, order, max_steps).transpose(0, 1).contiguous().to(device),
        noise=step_keys([job.seeds[m] for m in order.tolist()], max_steps).t().contiguous()
        .to(device),
        active=(sorted_steps.unsqueeze(0) > torch.arange(max_steps).unsqueeze(1)).to(device),
        total=torch.zeros(job.members, device=device),
        bad=torch.full((job.members,), -1, dtype=torch.long, device=device))


def _step_fn(ctx: Context, objective: Objective, train: tuple[str, ...], batches_per_step: int,
             optimizer) -> callable:
    """The step of the `b` members a call is given (the bucket), `active` of them for real.

    Every tensor argument holds only these `b` members (a prefix view, sliced by the caller): a
    graph that slices its inputs itself compiles several times slower.
    """
    def member(trained, rest, batch, shared, hp):
        out = objective({**rest, **trained}, batch, shared, hp, ctx)
        loss, updates = out if isinstance(out, tuple) else (out, {})
        return loss, (loss, updates)

    per_member = vmap(grad(member, has_aux=True), in_dims=(0, 0, 0, None, 0))

    def step(state, buffers, lrs, hp, shared, data, local, clients, noise, total, bad, active,
             step_idx):
        batch = {**gather(data, local, clients, batches_per_step), "key": noise}
        grads, (losses, updates) = per_member(
            {g: state[g] for g in train}, {g: v for g, v in state.items() if g not in train},
            batch, shared, hp)
        # padded members step with gradient 0 at learning rate 0: their parameters stay as they
        # are (their optimizer state changes, but they take no further step in this job)
        update(optimizer, [state[g][key] for g in train for key in state[g]],
               [torch.where(active, lr, 0.0) for lr in lrs], buffers,
               [_keep(active, grads[g][key], 0.0) for g in train for key in state[g]],
               len(local), step_idx)
        for g, group in updates.items():
            for key, value in group.items():
                state[g][key].copy_(_keep(active, value, state[g][key]))
        total.add_(torch.where(active, losses, 0.0))
        bad.copy_(torch.where(active & (bad < 0) & ~torch.isfinite(losses), step_idx, bad))

    return step


def _keep(active: Tensor, new: Tensor, old: "Tensor | float") -> Tensor:
    """`new` for the active members [b], `old` for the padded ones."""
    return torch.where(active.view(-1, *([1] * (new.dim() - 1))), new, old)


def _name(objective: Objective) -> str:
    return getattr(objective, "__qualname__", type(objective).__name__)
