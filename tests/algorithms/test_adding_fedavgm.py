"""docs/adding-an-algorithm.md's FedAvgM: two files, a working algorithm, every miss refused.

The doc's two FedAvgM blocks are taken verbatim: written into a copy of the package they add
exactly two files and validate; loaded here they run two hand-computed rounds; each way a
newcomer gets them wrong fails at `pflpipe validate` (exit 2) with the fix.

Hand case (`line_ctx`): one client with the sample (1, 1), ŷ = w·x, local lr 0.1, one step a
round, so a client at x trains to x + 0.2·(1 − x). β = 0.5, η = 1:
round 1: x = 0 → mean 0.2; v = 0.5·0 + (0 − 0.2) = −0.2; x = 0 − v = 0.2
round 2: mean = 0.2 + 0.2·0.8 = 0.36; v = 0.5·(−0.2) + (0.2 − 0.36) = −0.26; x = 0.46
(FedAvg would be at 0.36.)
"""

import filecmp
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pflpipe
from pflpipe.algorithms import REGISTRY
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer, SequentialTrainer

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(pflpipe.__file__).parent
SPEC = """\
experiment: {{name: fedavgm}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4}}
{federation}personalization:
  - {{name: fedper}}
  - {{name: fedavgm, server_momentum: 0.5}}
"""
VALIDATE = ("import sys; from pflpipe.cli import main; "
            "sys.exit(main(['validate', '-q', sys.argv[1]]))")
REFERENCE = ("from pflpipe.spec.reference import markdown_reference; "
             "print(markdown_reference(), end='')")


def _doc_files() -> dict[str, str]:
    """The doc's FedAvgM files: {path in the repository: text}."""
    doc = (REPO / "docs" / "adding-an-algorithm.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    return {block.splitlines()[0].removeprefix("# "): block for block in blocks
            if "fedavgm" in block.splitlines()[0]}


def _copy_with_fedavgm(root: Path, edit=None) -> Path:
    """A copy of the package under `root`/site with the doc's files (changed by `edit`)."""
    package = root / "site" / "pflpipe"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    for path, text in _doc_files().items():
        (root / "site" / path).write_text(edit(path, text) if edit else text, encoding="utf-8")
    return package


def _validate(root: Path, federation: str = "") -> subprocess.CompletedProcess:
    spec = root / "spec.yaml"
    spec.write_text(SPEC.format(federation=federation))
    return subprocess.run([sys.executable, "-c", VALIDATE, str(spec)], capture_output=True,
                          text=True, cwd=root, env={"PYTHONPATH": str(root / "site")},
                          timeout=180)


def _changed(left: Path, right: Path) -> list[str]:
    """Files that differ between two trees or exist on one side only (relative to `right`)."""
    out = []
    compare = filecmp.dircmp(left, right, ignore=["__pycache__"])

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(prefix + name for name in cmp.right_only + cmp.left_only + cmp.diff_files)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(compare, "")
    return sorted(out)


def test_fedavgm_is_two_new_files_that_validate(tmp_path):
    # Execute
    package = _copy_with_fedavgm(tmp_path)
    done = _validate(tmp_path)
    reference = subprocess.run([sys.executable, "-c", REFERENCE], capture_output=True, text=True,
                               cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")},
                               timeout=180, check=True).stdout

    # Assert: two files written; the generated reference, as the doc says, is to be regenerated
    assert sorted(_doc_files()) == ["pflpipe/algorithms/fedavgm.py",
                                    "pflpipe/spec/algorithms/fedavgm_params.py"]
    assert _changed(PACKAGE, package) == ["algorithms/fedavgm.py",
                                          "spec/algorithms/fedavgm_params.py"]
    assert done.returncode == 0, done.stderr
    committed = (REPO / "docs" / "spec-reference.md").read_text()
    assert "server_momentum" in reference and "server_momentum" not in committed


@pytest.fixture
def fedavgm(monkeypatch):
    """The doc's FedAvgM class, loaded as its two modules (and registered while the test runs)."""
    for path, text in sorted(_doc_files().items(), reverse=True):   # the params model first
        name = path.removesuffix(".py").replace("/", ".")
        spec = importlib.util.spec_from_loader(name, loader=None)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        exec(compile(text, path, "exec"), module.__dict__)  # noqa: S102 - the doc's own code
    yield REGISTRY["fedavgm"]
    REGISTRY.pop("fedavgm")


@pytest.mark.parametrize("trainer", [BatchedTrainer, SequentialTrainer])
def test_fedavgm_of_the_doc_matches_hand_computed_rounds(fedavgm, line_ctx, clients, trainer):
    # Prepare
    params = fedavgm.params_type()(name="fedavgm", server_momentum=0.5, server_lr=1.0)
    algorithm = fedavgm(params, head=frozenset(), lr=0.1, local_epochs=1)

    # Execute: one round, and two
    results = [Federation(algorithm, line_ctx, clients([(1, 1)]), trainer(line_ctx),
                          Plan(rounds=rounds, local_epochs=1, batch_size=64, lr=0.1, seed=0))
               .run({"w": torch.tensor([0.0])}) for rounds in (1, 2)]

    # Assert: the hand-computed rounds; the velocity stays on the server, so a client downloads
    # the one float32 weight a round, as under FedAvg (8 bytes if `velocity` were sent)
    assert [r.global_params["w"].item() for r in results] == pytest.approx([0.2, 0.46], abs=1e-6)
    assert [row["bytes_received"] for row in results[-1].rows if row["split"] == "train"] == [4, 4]
    assert set(results[-1].server) == {"_velocity"}


def _replace(old: str, new: str, where: str):
    def edit(path: str, text: str) -> str:
        if where not in path:
            return text
        assert old in text
        return text.replace(old, new)
    return edit


MISSES = {
    "no register": (
        _replace("@register\n", "", "pflpipe/algorithms/"),
        "algorithm 'fedavgm' is not registered: decorate its class in "
        "pflpipe/algorithms/fedavgm.py with @register"),
    "name not a Literal": (
        _replace('name: Literal["fedavgm"]', "name: str", "spec/"),
        "FedAvgMParams.name is declared as str; declare it `name: Literal[\"fedavgm\"]` in "
        "pflpipe/spec/algorithms/fedavgm_params.py"),
    "no params model": (
        _replace("class FedAvgMParams(FederatedParams)", "class FedAvgMParams", "spec/"),
        "pflpipe/spec/algorithms/fedavgm_params.py defines no params model; define a subclass of "
        "FederatedParams"),
    "hook signature": (
        _replace("def server_step(self, round):", "def server_step(self, round, server):",
                 "pflpipe/algorithms/"),
        "FedAvgM.server_step(self, round, server) in pflpipe/algorithms/fedavgm.py does not take "
        "what the engine passes; write `def server_step(self, round)`"),
    "objective signature": (
        _replace("    def init_server", "    def my_objective(self, state, batch):\n"
                 "        return 0\n\n    def init_server", "pflpipe/algorithms/"),
        "FedAvgM.my_objective(self, state, batch) in pflpipe/algorithms/fedavgm.py does not take "
        "what the engine passes; write `def my_objective(self, state, batch, shared, hp, ctx)`"),
}


@pytest.mark.parametrize("miss", sorted(MISSES))
def test_each_miss_of_fedavgm_fails_at_validate_with_the_fix(tmp_path, miss):
    # Prepare
    edit, message = MISSES[miss]
    _copy_with_fedavgm(tmp_path, edit)

    # Execute
    done = _validate(tmp_path)

    # Assert: exit 2, the entry's line and the fix, no traceback
    assert done.returncode == 2, done.stderr
    assert "spec.yaml:6: personalization[1].name: " in done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_server_optimizer_on_top_of_fedavgm_fails_at_validate(tmp_path):
    _copy_with_fedavgm(tmp_path)

    done = _validate(tmp_path, "federation: {server_optimizer: {name: fedadam}}\n")

    assert done.returncode == 2, done.stderr
    assert ("spec.yaml:7: personalization[1].name: algorithm 'fedavgm' has its own server rule "
            "(server_step in pflpipe/algorithms/fedavgm.py), which replaces FedAvg's and so "
            "federation.server_optimizer fedadam") in done.stderr


def test_an_own_server_step_refuses_the_server_optimizer_it_would_replace(fedavgm):
    from pflpipe.engine.optim import ServerOptimizerConfig

    params = fedavgm.params_type()(name="fedavgm")

    with pytest.raises(ValueError, match="FedAvgM has its own server rule .server_step., which "
                                         "replaces FedAvg's and so the server optimizer 'fedadam'"):
        fedavgm(params, head=frozenset(), lr=0.1, local_epochs=1,
                server_optimizer=ServerOptimizerConfig("fedadam", lr=0.1))
