"""The installed package, not the checkout: build the wheel, install it into a folder of its own
and import from there.

`components/` and `pipelines/` sit at the top of the repository and are installed as
`pflpipe.components` and `pflpipe.pipelines` (pyproject's `package-dir`), so an editable install
proves nothing about the wheel. The sources pyproject names are copied to a temporary folder
and built there (the checkout gets no `build/`): with the setuptools of this environment when it
is new enough (no network needed), else in pip's isolated build environment, which fetches
setuptools and wheel from the configured package index. The wheel is installed with
``pip install --no-deps --target``; a child process with only that folder on PYTHONPATH and its
working directory outside the repository then imports the package, compiles the quickstart
pipeline and runs the CLI.
"""

import json
import shutil
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
#: A PEP 639 license string (`license = "Apache-2.0"`) needs setuptools 77 or later.
PEP639_SETUPTOOLS = Version("77")
STAGES = {"partition_data", "warm_start_fedavg", "train_local", "personalize", "select_teachers",
          "distill_grid_search", "merge_shards", "collect_results", "evaluate_fairness",
          "tune_point", "tune", "train_members", "collect_members"}


def _local_setuptools_can_build() -> bool:
    """Whether this environment's setuptools meets the build requirements (no isolation needed)."""
    try:
        installed = Version(metadata.version("setuptools"))
    except metadata.PackageNotFoundError:
        return False
    needed = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    return installed >= PEP639_SETUPTOOLS and all(
        installed in r.specifier for r in needed if r.name == "setuptools")


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the sources and install it into a folder; return it."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in set(PYPROJECT["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(REPO / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    isolation = ["--no-build-isolation"] if _local_setuptools_can_build() else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
          "-w", str(tmp / "wheels"), str(src)], cwd=tmp)
    [wheel] = (tmp / "wheels").glob("pflpipe-*.whl")
    site = tmp / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
          str(site), str(wheel)], cwd=tmp)
    return site


def test_wheel_holds_every_module_of_the_source_folders(installed):
    expected = set()
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        for path in (REPO / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                inner = path.relative_to(REPO / folder)
                expected.add(Path(*package.split("."), inner).as_posix())
    found = {p.relative_to(installed).as_posix() for p in installed.rglob("*.py")
             if "__pycache__" not in p.parts}

    assert expected - found == set(), "modules missing from the wheel (pyproject `packages`?)"
    assert expected <= found


def test_wheel_installs_one_top_level_package_with_its_data(installed):
    top = {p.name for p in installed.iterdir()}

    assert {"pflpipe", "pflpipe-0.1.0.dist-info"} <= top
    # components/ and pipelines/ live inside pflpipe, never as top-level packages of their own.
    assert not top & {"components", "pipelines", "tests", "benchmarks", "specs"}
    assert (installed / "pflpipe" / "py.typed").is_file()
    entry_points = (installed / "pflpipe-0.1.0.dist-info" / "entry_points.txt").read_text()
    assert "pflpipe = pflpipe.cli:main" in entry_points


CHILD = textwrap.dedent("""\
    import importlib, json, pkgutil, sys
    from importlib import resources
    from pathlib import Path

    import pflpipe
    import pflpipe.cli
    import pflpipe.components
    import pflpipe.components.personalize
    import pflpipe.pipelines
    from pflpipe.pipelines.compiler import compile_pipeline
    from pflpipe.spec import read_spec

    components = sorted(m.name for m in pkgutil.iter_modules(pflpipe.components.__path__))
    modules = [pflpipe, pflpipe.cli, pflpipe.components.personalize, pflpipe.pipelines]
    modules += [importlib.import_module(f"pflpipe.components.{name}") for name in components]
    spec = read_spec(sys.argv[1])
    pipeline = pflpipe.pipelines.build_pipeline(spec)
    compiled = compile_pipeline(spec, Path("compiled.yaml")).read_text()
    print(json.dumps({
        "files": {m.__name__: m.__file__ for m in modules},
        "components": components,
        "pipeline": pipeline.name,
        "compiled_has_personalize": "comp-personalize" in compiled,
        "py_typed": resources.files("pflpipe").joinpath("py.typed").is_file(),
        "cli_validate": pflpipe.cli.main(["validate", sys.argv[1]]),
    }))
""")


@pytest.fixture(scope="module")
def child_report(installed, tmp_path_factory):
    """Run CHILD with only the installed folder on PYTHONPATH, outside the repository."""
    work = tmp_path_factory.mktemp("outside")
    spec = work / "persfl-digits.yaml"
    shutil.copy2(REPO / "specs" / "persfl-digits.yaml", spec)
    env = {"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin", "HOME": str(work),
           "CI": "true"}
    done = _run([sys.executable, "-c", CHILD, str(spec)], cwd=work, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_installed_modules_are_imported_from_the_install_not_the_checkout(child_report,
                                                                        installed):
    files = child_report["files"]

    assert set(files) >= {"pflpipe", "pflpipe.cli", "pflpipe.components.personalize",
                          "pflpipe.pipelines"}
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(installed.resolve()), f"{name}: {file}"
        assert not Path(file).resolve().is_relative_to(REPO), f"{name}: {file}"


def test_installed_package_has_a_component_per_stage(child_report):
    assert set(child_report["components"]) - {"_image"} == STAGES


def test_installed_package_builds_and_compiles_the_quickstart_pipeline(child_report):
    assert child_report["pipeline"] == "persfl-digits"
    assert child_report["compiled_has_personalize"] is True
    assert child_report["py_typed"] is True
    assert child_report["cli_validate"] == 0
