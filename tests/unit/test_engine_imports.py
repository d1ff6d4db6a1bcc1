"""The engine owns the hook protocol: no module under pflpipe/engine imports pflpipe.algorithms."""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pflpipe

ENGINE = Path(pflpipe.__file__).parent / "engine"


def _imported(path: Path) -> set[str]:
    """Every module `path` imports (relative imports resolved against pflpipe.engine)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = "pflpipe.engine".rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            names |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return names


def test_no_engine_module_imports_the_algorithms():
    # Execute: the imports of every engine module, top level and inside functions
    offenders = {path.name: sorted(name for name in _imported(path)
                                   if name.startswith("pflpipe.algorithms"))
                 for path in sorted(ENGINE.glob("*.py"))}

    # Assert
    assert {name: found for name, found in offenders.items() if found} == {}


def test_importing_the_engine_loads_no_algorithm_module():
    # Prepare: every module of the engine package, imported in a fresh interpreter
    modules = [f"pflpipe.engine.{info.name}" for info in pkgutil.iter_modules([str(ENGINE)])]
    code = (f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
            "print(sorted(m for m in sys.modules if m.startswith('pflpipe.algorithms')))")

    # Execute
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)

    # Assert
    assert len(modules) > 10
    assert done.stdout.strip() == "[]"
