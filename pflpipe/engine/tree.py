"""Client state as a two-level tree: ``{group: {key: Tensor}}``.

A *group* is one set of tensors a client holds — ``"model"`` (the parameters it trains and
sends), ``"personal"`` (Ditto's v), ``"alpha"`` (APFL's mixing weight) … A *stacked* tree holds
every member's copy along a leading axis: ``{group: {key: Tensor[M, ...]}}``.
"""

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

Group = dict[str, Tensor]
Tree = dict[str, Group]


def tree_map(fn: Callable[[Tensor], Tensor], tree: Mapping[str, Mapping[str, Tensor]]) -> Tree:
    """Apply `fn` to every tensor of `tree`."""
    return {group: {key: fn(value) for key, value in tensors.items()}
            for group, tensors in tree.items()}


def broadcast(group: Mapping[str, Tensor], members: int) -> Group:
    """Stack `members` copies of one group (contiguous, so each member can be written alone)."""
    return {key: value.unsqueeze(0).expand(members, *value.shape).clone()
            for key, value in group.items()}


def members(tree: Tree) -> int:
    """The number of members of a stacked tree (0 when it holds no tensor)."""
    return len(next((v for group in tree.values() for v in group.values()), ()))


def is_identity(index: Tensor, n: int) -> bool:
    """Whether `index` is every one of `n` members, in order (a copy by it changes nothing)."""
    return len(index) == n and torch.equal(index, torch.arange(n, device=index.device))


def select(tree: Tree, index: Tensor) -> Tree:
    """The members `index` (a LongTensor) of a stacked tree, copied.

    Advanced indexing, not `index_select`: on CPU, torch 2.15's index_select along dim 0 takes
    ~50x longer for a sorted index (84 ms vs 1.8 ms for [100, 100, 784]). Every member in order
    (the identity): a contiguous clone, the same values and layout, for less.
    """
    if not is_identity(index, members(tree)):
        return tree_map(lambda value: value[index], tree)

    def copy(value: Tensor) -> Tensor:   # contiguous, as value[index] is for these layouts
        dense = value.is_contiguous() or (value.stride(0) == 0 and value[0].is_contiguous())
        return value.clone(memory_format=torch.contiguous_format) if dense else value[index]

    return tree_map(copy, tree)


def assign(target: Tree, index: Tensor, source: Tree) -> None:
    """Write `source`'s members into rows `index` of `target` (in place), group by group.

    A group `target` lacks (one an algorithm's `finish` adds) is created, zero for the members
    not in `index`.
    """
    n = members(target)
    with torch.no_grad():
        for group, tensors in source.items():
            into = target.setdefault(group, {})
            for key, value in tensors.items():
                if key not in into:
                    into[key] = value.new_zeros((n, *value.shape[1:]))
                into[key].index_copy_(0, index, value.to(into[key].dtype))


def renew(target: Tree, source: Tree) -> None:
    """Make `source`'s members every member of `target`: its tensors replace target's.

    Unlike `assign`, no tensor is written in place: whoever holds one of target's old tensors
    (the round's start, an algorithm's server state) keeps its values, so the caller need not
    copy them first. A source tensor that does not own its memory (an expanded or sliced view) or
    shares it with another of target's tensors is copied, as `assign` would have.
    """
    for group, tensors in source.items():
        into = target.setdefault(group, {})
        for key, value in tensors.items():
            into[key] = value.detach().to(into[key].dtype) if key in into else value.detach()
    seen = set()
    for tensors in target.values():
        for key, value in tensors.items():
            storage = value.untyped_storage()
            if (storage.data_ptr() in seen or not value.is_contiguous() or value.storage_offset()
                    or storage.nbytes() != value.numel() * value.element_size()):
                value = tensors[key] = value.clone()
            seen.add(value.untyped_storage().data_ptr())


def assign_if(target: Tree, index: Tensor, mask: Tensor, source: Tree) -> None:
    """Write `source`'s members where `mask` [M] is true into rows `index` of `target`, in place.

    Rows whose mask is false keep their values. When `index` is every row in order, one
    ``torch.where`` into `target` (no copy of either tree); else only the chosen rows are copied.
    """
    every = is_identity(index, members(target))
    rows = None if every else mask.nonzero().flatten()
    with torch.no_grad():
        for group, tensors in source.items():
            for key, value in tensors.items():
                into = target[group][key]
                if every:
                    torch.where(mask.view(-1, *([1] * (value.dim() - 1))), value.to(into.dtype),
                                into, out=into)
                else:
                    into.index_copy_(0, index[rows], value[rows].to(into.dtype))


def sq_dist(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """Squared Euclidean distance ‖a − b‖² summed over every key the two share."""
    return sum(((a[key] - b[key]) ** 2).sum() for key in a if key in b)


def weighted_mean(group: Mapping[str, Tensor], weights: Tensor) -> Group:
    """Σ_c weights[c] · group[key][c] for every key of a stacked group [C, ...].

    Integer tensors (a BatchNorm's batch counter) are averaged in floating point and rounded.
    """
    out = {}
    for key, value in group.items():
        if value.is_floating_point():
            out[key] = torch.tensordot(weights.to(value.dtype), value, dims=1)
        else:
            mean = torch.tensordot(weights.double(), value.double(), dims=1)
            out[key] = mean.round().to(value.dtype)
    return out


def merge(*groups: Mapping[str, Tensor]) -> Group:
    """Union of groups; later ones win on shared keys."""
    out: Group = {}
    for group in groups:
        out.update(group)
    return out


def member(tree: Tree, index: int) -> Tree:
    """One member of a stacked tree (views)."""
    return tree_map(lambda value: value[index], tree)


def only(group: Mapping[str, Tensor], keys: Iterable[str]) -> Group:
    """The entries of `group` whose key is in `keys`."""
    wanted = set(keys)
    return {key: value for key, value in group.items() if key in wanted}
