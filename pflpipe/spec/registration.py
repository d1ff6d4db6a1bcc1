"""Check, without importing torch, that an algorithm a spec names can run.

An algorithm is two files (docs/adding-an-algorithm.md): its params model in
``pflpipe/spec/algorithms/<name>.py`` and its class in ``pflpipe/algorithms/<name>.py``, decorated
with ``@register``. `validate` reads the class's file as source (`ast`), so a missing file, a
missing decorator or a class bound to another params model is refused where the user is, with
the fix, instead of as a KeyError in the personalize task after the warm start.
"""

import ast
import functools
from pathlib import Path

from pflpipe.spec.algorithms import BROKEN, PARAMS

#: Where the algorithm classes live (the package `pflpipe.algorithms`, not imported here).
ALGORITHMS = Path(__file__).resolve().parent.parent / "algorithms"


def problem(name: str) -> str | None:
    """What keeps the algorithm `name` from running, with the fix; None if nothing does."""
    if name in BROKEN:
        return f"algorithm {name!r} cannot be used: {BROKEN[name]}"
    model = PARAMS.get(name)
    if model is None or model.stage == "distill_grid_search":  # PersFL has stages of its own
        return None
    return _class_problem(name, model.__name__)


@functools.cache
def _class_problem(name: str, params: str) -> str | None:
    path = ALGORITHMS / f"{name}.py"
    where = f"pflpipe/algorithms/{name}.py"
    if not path.is_file():
        return (f"algorithm {name!r} has a params model but no class: create {where} with "
                f"`@register class ...(Algorithm[{params}])` (docs/adding-an-algorithm.md)")
    classes = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)]
    registered = [node for node in classes if any(_names(d, "register") for d in
                                                  node.decorator_list)]
    if not registered:
        return (f"algorithm {name!r} is not registered: decorate its class in {where} with "
                "@register (from pflpipe.algorithms.base)")
    bound = {_subscript(base) for node in registered for base in node.bases} - {None}
    if bound and params not in bound:
        return (f"algorithm {name!r}: the registered class in {where} is configured by "
                f"{', '.join(sorted(bound))}; subclass Algorithm[{params}] instead")
    return None


def _names(node: ast.expr, name: str) -> bool:
    """Whether `node` is `name` or `something.name`."""
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name)


def _subscript(node: ast.expr) -> str | None:
    """The params model of a base ``Algorithm[XParams]``; None for any other base."""
    if isinstance(node, ast.Subscript) and _names(node.value, "Algorithm") and isinstance(
            node.slice, ast.Name):
        return node.slice.id
    return None
