"""`engine.compile`: each batched step as one compiled graph.

One step of :class:`~pflpipe.engine.trainer.BatchedTrainer` — gather the members' mini-batches,
the vmapped objective and its gradient (``vmap(grad(objective))``), the optimizer update, the
objective's own updates and the loss bookkeeping — is traced by ``torch.compile`` into one graph
(``fullgraph=True``), so a step costs one call instead of hundreds of small eager operations.

- **Buckets.** ``vmap`` fixes the number of members a graph steps. Members finish at different
  steps, so a step of ``k`` active members runs the graph of the next *bucket* — ``k`` rounded up
  to a power of two, at most the job's member count — and leaves the padded members untouched
  (a mask). A job compiles at most ⌈log₂ M⌉ + 1 graphs; with equal clients, one.
- **Cache.** Compiled graphs are kept on disk (inductor's FX graph and AOTAutograd caches) in
  ``$TORCHINDUCTOR_CACHE_DIR`` when set, else in ``~/.cache/pflpipe/torch-compile``
  (``$XDG_CACHE_HOME/pflpipe/torch-compile``), which every stage process shares, and later runs
  too: a process then only traces, it does not compile C++/Triton code again.
- **Fallback.** A step that does not compile (an operation the compiler does not support, no C++
  compiler) is logged with the reason and runs eagerly, for the rest of the process, with the
  same result up to rounding.
"""

import logging
import os
from pathlib import Path

import torch
from torch import Tensor
from torch.func import grad, vmap

from pflpipe.engine.optim import update
from pflpipe.engine.trainer import Context, Objective, Steps, as_pair, gather

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
    """The member count a step of `k` active members runs with: a power of two, ≤ `members`.

    >>> [bucket(k, 10) for k in (10, 9, 8, 5, 3, 1)]
    [10, 10, 8, 8, 4, 1]
    """
    return min(members, 1 << (k - 1).bit_length())


class StepCompiler:
    """The compiled steps of one trainer: a graph per objective and job layout, per bucket."""

    def __init__(self):
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir()))
        self._steps: dict[tuple, object] = {}   # key -> compiled function, or None: eager

    def step(self, ctx: Context, run: Steps, step: int, k: int) -> bool:
        """Step the first `k` members of `run`; False when the step does not compile."""
        job = run.job
        key = (id(ctx), job.objective, job.train, job.batches_per_step, job.optimizer)
        if key not in self._steps:
            self._steps[key] = torch.compile(
                _step_fn(ctx, job.objective, job.train, job.batches_per_step, job.optimizer),
                fullgraph=True, dynamic=False)
        compiled = self._steps[key]
        if compiled is None:
            return False
        b = bucket(k, job.members)
        try:
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT,
                                            accumulated_recompile_limit=RECOMPILE_LIMIT):
                compiled(run.state, run.optimizer.state, run.optimizer.lrs, run.hp, job.shared,
                         job.data, run.index[step, :b], run.clients[:b], run.noise[step, :b],
                         run.total, run.bad, run.active[step, :b], run.step_ids[step])
        except torch._dynamo.exc.TorchDynamoException as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            log.warning("engine.compile: the step of %s did not compile (%s); it runs eagerly",
                        _name(job.objective), reason)
            self._steps[key] = None
            return False
        return True


def _step_fn(ctx: Context, objective: Objective, train: tuple[str, ...], batches_per_step: int,
             optimizer) -> callable:
    """The step of the `b` members a call is given (the bucket), `active` of them for real."""
    def member(trained, rest, batch, shared, hp):
        loss, updates = as_pair(objective({**rest, **trained}, batch, shared, hp, ctx))
        return loss, (loss, updates)

    per_member = vmap(grad(member, has_aux=True), in_dims=(0, 0, 0, None, 0))

    def step(state, buffers, lrs, hp, shared, data, local, clients, noise, total, bad, active,
             step_idx):
        b = local.shape[0]
        batch = {**gather(data, local, clients, batches_per_step), "key": noise}
        view = {g: {key: t[:b] for key, t in group.items()} for g, group in state.items()}
        grads, (losses, updates) = per_member(
            {g: view[g] for g in train}, {g: v for g, v in view.items() if g not in train},
            batch, shared, {name: value[:b] for name, value in hp.items()})
        params = [state[g][key] for g in train for key in state[g]]
        before = [p[:b].clone() for p in params]
        update(optimizer, params, lrs, buffers, [grads[g][key] for g in train for key in state[g]],
               b, step_idx)
        for param, old in zip(params, before, strict=True):
            param[:b].copy_(_keep(active, param[:b], old))
        for g, group in updates.items():
            for key, value in group.items():
                state[g][key][:b].copy_(_keep(active, value, state[g][key][:b]))
        total[:b] += torch.where(active, losses, 0.0)
        bad[:b] = torch.where(active & (bad[:b] < 0) & ~torch.isfinite(losses), step_idx, bad[:b])

    return step


def _keep(active: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """`new` for the active members [b], `old` for the padded ones."""
    return torch.where(active.view(-1, *([1] * (new.dim() - 1))), new, old)


def _name(objective: Objective) -> str:
    return getattr(objective, "__qualname__", type(objective).__name__)
