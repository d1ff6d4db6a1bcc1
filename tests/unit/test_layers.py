"""The house's layers (docs/contracts.md, "Layers"): every import points down.

Each package of pflpipe (and each module at its top: `layout`, `events`, ...) stands on a layer;
a module may import only from layers below its own, so no arrow runs up and no two packages
import each other. The imports are read from the source (`ast`), top level and inside
functions.
"""

import ast
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Where each importable package's source lives (pipelines/ and components/ are installed as
#: pflpipe.pipelines and pflpipe.components).
ROOTS = {"pflpipe": REPO / "pflpipe", "pflpipe.pipelines": REPO / "pipelines",
         "pflpipe.components": REPO / "components"}
#: The exported Flower/PFLlib app runs without pflpipe (docs/contracts.md, "Files on disk").
APART = ("pflpipe.data.flower_app",)

#: Bottom first. A part (a package, or a module at the top of pflpipe) imports only from the
#: layers below its own.
LAYERS = (
    ("errors", "version"),
    ("markdown", "layout", "events", "sharing", "beside"),
    ("spec", "metrics"),
    ("storage", "models", "overwrite"),
    ("data", "disk"),
    ("engine",),
    ("algorithms", "distill", "compute"),
    ("training",),
    ("tracking", "report"),
    ("stages",),
    ("components",),
    ("pipelines",),
    ("cli",),
    ("api",),
    ("",),   # the package root: pflpipe/__init__.py
)
LAYER = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
#: The libraries only one part may import (docs/contracts.md).
OWNERS = {"mlflow": "tracking", "boto3": "storage", "botocore": "storage"}


def modules() -> dict[str, str]:
    """Every module of the installed package, by dotted name: its source."""
    found = {}
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            name = ".".join((package, *path.relative_to(root).with_suffix("").parts))
            name = name.removesuffix(".__init__")
            if not name.startswith(APART):
                found[name] = path.read_text(encoding="utf-8")
    return found


def part(module: str) -> str:
    """The part a module belongs to: `pflpipe.report.rendering` → "report"; the root → ""."""
    return module.split(".")[1] if module.count(".") else ""


def imports(module: str, source: str, known: set[str]) -> set[str]:
    """The modules of `known` (and third-party tops) that `source` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
    return found


def arrows(tree: dict[str, str]) -> list[tuple[str, str]]:
    """(importer, imported) for every import between two modules of `tree`, and of a library."""
    known = set(tree)
    return sorted((module, target) for module, source in tree.items()
                  for target in imports(module, source, known) if target != module)


def violations(tree: dict[str, str]) -> list[str]:
    """Each arrow up the layers (or sideways between two parts of one layer), each import of the
    package root from inside it, and each library imported outside its owner."""
    found = []
    for module, target in arrows(tree):
        if target == "pflpipe" and module != "pflpipe":
            found.append(f"{module} imports the package root (`from pflpipe import ...` of a name"
                         " that is no module)")
        elif target.startswith("pflpipe.") and part(module) != part(target):
            if LAYER[part(target)] >= LAYER[part(module)]:
                found.append(f"{module} → {target}: {part(module) or 'the root'} (layer "
                             f"{LAYER[part(module)]}) may not import {part(target)} (layer "
                             f"{LAYER[part(target)]})")
        elif target.split(".")[0] in OWNERS and part(module) != OWNERS[target.split(".")[0]]:
            found.append(f"{module} imports {target}: only pflpipe.{OWNERS[target.split('.')[0]]}"
                         " does")
    return found


def test_every_part_stands_on_a_layer():
    # Execute
    parts = {part(module) for module in modules()}

    # Assert: a new package or top-level module gets its layer in LAYERS (and docs/contracts.md)
    assert parts - set(LAYER) == set()
    assert set(LAYER) - parts == set()


def test_every_import_points_down_the_layers():
    assert violations(modules()) == []


@pytest.mark.parametrize(("module", "line", "expected"), [
    ("pflpipe.engine.extra", "from pflpipe.report import rendering",
     "pflpipe.engine.extra → pflpipe.report.rendering: engine (layer 5) may not import report"),
    ("pflpipe.metrics.extra", "def f():\n    from pflpipe.compute.totals import totals\n",
     "pflpipe.metrics.extra → pflpipe.compute.totals: metrics (layer 2) may not import compute"),
    ("pflpipe.tracking.extra", "from pflpipe.report import rendering",
     "pflpipe.tracking.extra → pflpipe.report.rendering: tracking (layer 8) may not import report"),
    ("pflpipe.cli.extra", "from pflpipe import __version__",
     "pflpipe.cli.extra imports the package root"),
    ("pflpipe.stages.extra", "import mlflow", "pflpipe.stages.extra imports mlflow"),
])
def test_an_arrow_up_the_layers_is_caught(module, line, expected):
    # Prepare: today's tree with one more module holding the offending import
    tree = {**modules(), module: line}

    # Execute
    found = violations(tree)

    # Assert: exactly that import is named
    assert len(found) == 1 and found[0].startswith(expected), found


def test_module_names_say_where_they_are():
    # Prepare: a component is its stage's KFP shim and bears its name (components/<stage>.py)
    stages = {m.rsplit(".", 1)[1] for m in modules() if m.startswith("pflpipe.stages.")}
    names = Counter(m.rsplit(".", 1)[1] for m in modules()
                    if m.count(".") > 1 and not (m.startswith("pflpipe.components.")
                                                 and m.rsplit(".", 1)[1] in stages))

    # Assert: no two modules share a file name (no base.py, no local.py twice)
    assert {name: n for name, n in names.items() if n > 1} == {}


def test_stages_holds_only_stages():
    # Execute: the modules of pflpipe/stages and the functions each defines at its top
    stages = {m: {node.name for node in ast.parse(src).body if isinstance(node, ast.FunctionDef)}
              for m, src in modules().items() if m.startswith("pflpipe.stages.")}

    # Assert: each is a stage with its `run`, and a component or a verb calls it
    assert {m for m, functions in stages.items() if "run" not in functions} == set()
    assert len(stages) == 14
