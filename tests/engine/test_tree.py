"""The stacked-tree operations the round loop uses instead of copies: exact values, no aliasing."""

import pytest
import torch

from pflpipe.engine.tree import assign, assign_if, renew, select


def _layouts():
    """Member-stacked tensors [5, ...] of the layouts the engine meets."""
    return {"contiguous": torch.rand(5, 3, 4), "transposed": torch.rand(5, 4, 3).transpose(1, 2),
            "expanded": torch.rand(3, 4).expand(5, 3, 4),
            "expanded_t": torch.rand(4, 3).t().expand(5, 3, 4),
            "members_inner": torch.rand(3, 5).t(), "vector": torch.rand(5)}


def test_select_of_every_member_in_order_is_a_copy_with_indexings_layout():
    tree = {"g": _layouts()}
    for index in (torch.arange(5), torch.tensor([3, 0, 4, 1, 2]), torch.tensor([1, 3])):
        out = select(tree, index)
        for key, value in tree["g"].items():
            expected = value[index]
            assert torch.equal(out["g"][key], expected), key
            assert out["g"][key].stride() == expected.stride(), key
            assert out["g"][key].data_ptr() != value.data_ptr(), key


@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [3, 0, 2]])   # every row in order; some
def test_assign_if_writes_only_the_masked_members_rows(rows):
    # Prepare: 4 rows of zeros; members 1, 2, … written where the mask [T, F, T, F] is true
    index, mask = torch.tensor(rows), torch.tensor([True, False, True, False])[:len(rows)]
    target = {"model": {"w": torch.zeros(4, 2)}}
    source = {"model": {"w": torch.arange(1.0, 2.0 * len(rows) + 1).view(len(rows), 2)}}
    expected = torch.zeros(4, 2)
    for i, row in enumerate(rows):
        if mask[i]:
            expected[row] = source["model"]["w"][i]

    # Execute
    assign_if(target, index, mask, source)

    # Assert
    assert torch.equal(target["model"]["w"], expected)


def test_renew_replaces_without_writing_and_owns_every_tensor():
    # Prepare: an old state someone still holds; a new one with a pass-through, an expanded
    # view, a slice and one tensor under two keys (Self-FL's "reported" is its old "var")
    old_var, old_w = torch.zeros(3), torch.zeros(3, 2)
    target = {"model": {"w": old_w}, "stats": {"var": old_var, "reported": torch.zeros(3)}}
    shared = torch.rand(3, 2)
    source = {"model": {"w": torch.rand(2).expand(3, 2)},
              "stats": {"var": torch.ones(3), "reported": old_var},
              "extra": {"a": shared[:, 0], "b": shared, "c": shared}}
    expected = {g: {k: v.clone() for k, v in group.items()} for g, group in source.items()}

    # Execute
    renew(target, source)

    # Assert: the values, untouched old tensors, and no two tensors sharing memory
    assert {g: set(group) for g, group in target.items()} == {g: set(group) for g, group
                                                              in expected.items()}
    for g, group in expected.items():
        for k, value in group.items():
            assert torch.equal(target[g][k], value), (g, k)
            assert target[g][k].is_contiguous() and target[g][k].stride(0) > 0
    assert torch.equal(old_w, torch.zeros(3, 2)) and torch.equal(old_var, torch.zeros(3))
    pointers = [t.untyped_storage().data_ptr() for group in target.values() for t in group.values()]
    assert len(set(pointers)) == len(pointers)


def test_renew_equals_assign_of_every_member():
    source = {"model": {"w": torch.rand(4, 3)}, "new": {"n": torch.arange(4)}}
    by_assign = {"model": {"w": torch.zeros(4, 3)}}
    by_renew = {"model": {"w": torch.zeros(4, 3)}}

    assign(by_assign, torch.arange(4), source)
    renew(by_renew, source)

    for g, group in by_assign.items():
        for k, value in group.items():
            assert torch.equal(by_renew[g][k], value) and by_renew[g][k].dtype == value.dtype
