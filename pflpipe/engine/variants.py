"""Hyper-parameter variants of one algorithm as members of one federation.

Runs trained as members (`pflpipe.engine.members`) may run one algorithm at different values of
the hyper-parameters its class lists in ``member_params``. Such a hyper-parameter is read only

- in server hooks (`server_step`, `aggregate`, `schedule`, `dispatch`, the initial state): those
  run run by run, each with the run's own algorithm, so they see the run's value as a Python
  number, as alone; or
- in client hooks (objectives, `fresh`, `finish`, `personalized`, `diagnostics`; not `predict`)
  as a factor of a tensor (``lam * d``, ``lam / 2 * d``): a client hook runs for every member in
  one vmapped call, so there a member sees its run's value as a float32 0-d tensor
  (`view`). A Python float multiplied into a float32 tensor is rounded to float32 first as well,
  so the product is the same to the bit.

A value that meets other numbers before it meets a tensor (``1 - lam``, ``eta * lam``), a step
count, a shape or a branch cannot vary per member; runs that differ in one train apart (the
stage that groups runs says why: `pflpipe.stages.train_members`). Runs must also train alike:
the same phases (epochs, steps, learning rates), which `varying` checks.
"""

import copy
import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from pflpipe.engine.protocol import AlgorithmProtocol, Phase
from pflpipe.engine.tree import Group
from pflpipe.errors import DataError


def varying(algorithms: Sequence[AlgorithmProtocol]) -> tuple[str, ...]:
    """The ``member_params`` whose values differ between `algorithms` (one per run).

    Raises DataError when the runs cannot be members of one federation: algorithms of different
    classes, learning rates or phases, params that differ in a field neither in `member_params`
    nor in the params' `run_fields` (label, warm start), or a varying value that is not a number.
    """
    first = algorithms[0]
    name = type(first).__name__
    for other in algorithms[1:]:
        if type(other) is not type(first):
            raise DataError(f"runs of {name} and {type(other).__name__} cannot be members of one "
                            "federation: members run one algorithm")
        if (other.lr, other.local_epochs, other.head) != (first.lr, first.local_epochs,
                                                           first.head):
            raise DataError(f"{name}'s runs differ in the learning rate, the local epochs or the "
                            "head; runs train as members only when they train alike")
        if _phases(other) != _phases(first):
            raise DataError(f"{name}'s runs differ in how they train (their phases: epochs, "
                            "steps, learning rates); runs train as members only when they "
                            "train alike")
    if getattr(first, "params", None) is None:
        return ()
    allowed = {*getattr(type(first), "member_params", ()), *type(first.params).run_fields}
    fixed = [a.params.model_dump(exclude=allowed) for a in algorithms]
    other = sorted({k for dump in fixed[1:] for k in dump if dump[k] != fixed[0][k]})
    if other:
        raise DataError(f"{name}'s runs differ in {', '.join(other)}, which cannot differ "
                        "between members of one batched run; such runs train apart")
    out = []
    for field in getattr(type(first), "member_params", ()):
        values = [getattr(a.params, field) for a in algorithms]
        if len(set(values)) == 1:
            continue
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise DataError(f"{name}.{field} differs between runs but is not a number in each "
                            f"({values}); such runs train apart")
        out.append(field)
    return tuple(out)


def values(algorithms: Sequence[AlgorithmProtocol], names: Sequence[str], index: Tensor
           ) -> Group:
    """Each client's value of every varying hyper-parameter in `names` [C] (float32).

    `index` [C] is each client's run.
    """
    return {name: torch.tensor([float(getattr(a.params, name)) for a in algorithms],
                               dtype=torch.float32, device=index.device)[index]
            for name in names}


def view(algorithm: AlgorithmProtocol, own: dict[str, Tensor]) -> AlgorithmProtocol:
    """`algorithm` with the hyper-parameters `own` (a member's 0-d tensors) in its params."""
    member = copy.copy(algorithm)
    member.params = algorithm.params.model_copy(update=own)
    return member


def _phases(algorithm: AlgorithmProtocol) -> tuple:
    """The algorithm's phases and evaluation phases, objectives by their function."""
    def key(phase: Phase) -> Phase:
        return dataclasses.replace(
            phase, objective=_function(phase.objective),
            then=tuple((_function(fn), train) for fn, train in phase.then))

    return (tuple(map(key, algorithm.phases())), tuple(map(key, algorithm.eval_phases())))


def _function(fn):
    """A bound method's function (its instance aside), else `fn`."""
    return getattr(fn, "__func__", fn)
