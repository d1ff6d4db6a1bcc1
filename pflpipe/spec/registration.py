"""Check, without importing torch, that an algorithm a spec names can run.

An algorithm is two files (docs/adding-an-algorithm.md): its params model in
``pflpipe/spec/algorithms/<name>_params.py`` and its class in ``pflpipe/algorithms/<name>.py``,
decorated with ``@register``. `validate` reads the class's file as source (`ast`), so a missing
file, a missing decorator or a class bound to another params model is refused where the user is,
with the fix, instead of as a KeyError in the personalize task after the warm start. The class's
hooks are checked against the engine's protocol (``pflpipe/engine/protocol.py``, read as source
too): a hook or objective that cannot take the arguments the engine passes is refused with the
signature to write.
"""

import ast
import functools
from pathlib import Path

from pflpipe.spec.algorithms import BROKEN, PARAMS

#: Where the algorithm classes live (the package `pflpipe.algorithms`, not imported here).
ALGORITHMS = Path(__file__).resolve().parent.parent / "algorithms"
#: The engine's hook protocol: the classes of its roles hold every hook's signature.
PROTOCOL = ALGORITHMS.parent / "engine" / "protocol.py"
ROLES = ("ClientRule", "ServerRule", "Scoring")


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
                "@register (from pflpipe.algorithms.algorithm)")
    bound = {_subscript(base) for node in registered for base in node.bases} - {None}
    if bound and params not in bound:
        return (f"algorithm {name!r}: the registered class in {where} is configured by "
                f"{', '.join(sorted(bound))}; subclass Algorithm[{params}] instead")
    return next((text for node in registered if (text := _signature_problem(node, where))), None)


def server_rule_problem(name: str, optimizer: str) -> str | None:
    """Why `name` cannot run under the server optimizer `optimizer`: its own server rule.

    The server optimizer is applied by FedAvg's `server_step`; an algorithm that writes its own
    (SCAFFOLD, Flow …) replaces it, so the optimizer would not apply (the algorithm's constructor
    refuses it too, `pflpipe.algorithms.algorithm.Algorithm`).
    """
    path = ALGORITHMS / f"{name}.py"
    if not path.is_file() or not _defines(path, None, "server_step"):
        return None
    return (f"algorithm {name!r} has its own server rule (server_step in pflpipe/algorithms/"
            f"{name}.py), which replaces FedAvg's and so federation.server_optimizer {optimizer}: "
            "leave federation.server_optimizer at fedavg, or write the optimizer into the "
            "algorithm's server_step")


def _defines(path: Path, name: str | None, method: str) -> bool:
    """Whether a class of `path` or a base of it from pflpipe/algorithms defines `method`.

    The class is `name`, or the registered one if None.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or (name or "") not in ("", node.name) or (
                name is None and not any(_names(d, "register") for d in node.decorator_list)):
            continue
        if any(isinstance(f, ast.FunctionDef) and f.name == method for f in node.body):
            return True
        for base in node.bases:
            if isinstance(base, ast.Name) and (source := _source_of(tree, path, base.id)):
                return _defines(source, base.id, method)
    return False


def _source_of(tree: ast.Module, path: Path, name: str) -> Path | None:
    """The file of pflpipe/algorithms that defines class `name` used in `tree`, if any."""
    if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
        return path
    for node in tree.body:
        if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "pflpipe.algorithms.") and node.module != "pflpipe.algorithms.algorithm"
                and any(alias.name == name for alias in node.names)):
            return ALGORITHMS / f"{node.module.rsplit('.', 1)[1]}.py"
    return None


@functools.cache
def _hooks() -> dict[str, ast.arguments]:
    """Every hook of the protocol by name, with its arguments (``self`` first)."""
    tree = ast.parse(PROTOCOL.read_text(encoding="utf-8"))
    return {f.name: f.args for role in tree.body
            if isinstance(role, ast.ClassDef) and role.name in ROLES
            for f in role.body if isinstance(f, ast.FunctionDef)}


def _signature_problem(cls: ast.ClassDef, where: str) -> str | None:
    """A hook (or ``*_objective``) of `cls` the engine could not call, with the fix."""
    hooks = _hooks()
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef) or method.decorator_list:
            continue
        hook = "local_objective" if method.name.endswith("_objective") else method.name
        if hook not in hooks:
            continue
        want, got = hooks[hook], method.args
        passed = len(want.args) - len(want.defaults)      # what the engine always passes
        takes = len(got.args)
        if got.vararg is None and not (takes - len(got.defaults) <= passed <= takes):
            return (f"{cls.name}.{method.name}({_arguments(got)}) in {where} does not take "
                    f"what the engine passes; write `def {method.name}({_arguments(want)})` "
                    "(pflpipe/engine/protocol.py)")
    return None


def _arguments(args: ast.arguments) -> str:
    """The parameter list without annotations: ``self, state, batch, view=''``."""
    names = [a.arg for a in args.args]
    defaults = [ast.unparse(d) for d in args.defaults]
    tail = len(names) - len(defaults)
    return ", ".join(name if i < tail else f"{name}={defaults[i - tail]}"
                     for i, name in enumerate(names))


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
