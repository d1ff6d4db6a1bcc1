"""`pflpipe validate` refuses a spec whose algorithm could not run, with the fix, without torch.

Each case runs the real command line on a copy of the package with one file broken the way a
newcomer breaks it: a class without ``@register``, a params model without its class, a params model
whose ``name`` is a plain ``str``.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pflpipe
from pflpipe.spec.algorithms import PARAMS, params_models
from pflpipe.spec.registration import problem

SPEC = """\
experiment: {{name: reg}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4}}
personalization:
  - {{name: fedper}}
  - {{name: {name}}}
"""
#: Runs `pflpipe validate`, then says on stderr whether torch was imported.
VALIDATE = ("import sys; from pflpipe.cli import main; rc = main(['validate', '-q', sys.argv[1]]); "
            "print('torch imported:', 'torch' in sys.modules, file=sys.stderr); sys.exit(rc)")
FEDX_PARAMS = '''\
from typing import Literal
from pflpipe.spec.algorithms.params import FederatedParams


class FedxParams(FederatedParams):
    name: {annotation}
'''


def _validate(tmp_path: Path, name: str, edit) -> subprocess.CompletedProcess:
    """Run `pflpipe validate` of a spec naming `name` on a copy of pflpipe changed by `edit`."""
    package = tmp_path / "site" / "pflpipe"
    shutil.copytree(Path(pflpipe.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    edit(package)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(name=name))
    return subprocess.run([sys.executable, "-c", VALIDATE, str(spec)], capture_output=True,
                          text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")},
                          timeout=120)


def _unregister_ditto(package: Path) -> None:
    path = package / "algorithms" / "ditto.py"
    path.write_text(path.read_text().replace("@register\n", ""))


def _fedx_params(annotation: str):
    def edit(package: Path) -> None:
        (package / "spec" / "algorithms" / "fedx_params.py").write_text(
            FEDX_PARAMS.format(annotation=annotation))
    return edit


def test_validate_refuses_an_algorithm_class_without_register(tmp_path):
    # Execute
    done = _validate(tmp_path, "ditto", _unregister_ditto)

    # Assert: exit 2, the entry's line and the fix, no traceback, torch never imported
    assert done.returncode == 2, done.stderr
    assert ("spec.yaml:6: personalization[1].name: algorithm 'ditto' is not registered: "
            "decorate its class in pflpipe/algorithms/ditto.py with @register") in done.stderr
    assert "Traceback" not in done.stderr
    assert "torch imported: False" in done.stderr


def test_validate_refuses_a_params_model_without_its_algorithm_class(tmp_path):
    done = _validate(tmp_path, "fedx", _fedx_params('Literal["fedx"]'))

    assert done.returncode == 2, done.stderr
    assert ("personalization[1].name: algorithm 'fedx' has a params model but no class: create "
            "pflpipe/algorithms/fedx.py with `@register class ...(Algorithm[FedxParams])`"
            ) in done.stderr


def test_validate_refuses_a_params_model_whose_name_is_not_a_literal(tmp_path):
    # Execute: the spec names the broken algorithm
    done = _validate(tmp_path, "fedx", _fedx_params("str"))

    # Assert: its own problem, not "unknown value" and not an AttributeError
    assert done.returncode == 2, done.stderr
    assert ("personalization[1].name: algorithm 'fedx' cannot be used: FedxParams.name is "
            'declared as str; declare it `name: Literal["fedx"]` in '
            "pflpipe/spec/algorithms/fedx_params.py") in done.stderr
    assert "unknown value" not in done.stderr and "Traceback" not in done.stderr


def test_a_malformed_params_model_leaves_every_other_spec_valid(tmp_path):
    done = _validate(tmp_path, "ditto", _fedx_params("str"))

    # (a valid spec's model is then built on torch's meta device: validate's model checks)
    assert done.returncode == 0, done.stderr


def test_validate_refuses_a_class_bound_to_another_params_model(tmp_path):
    def rebind(package: Path) -> None:
        path = package / "algorithms" / "ditto.py"
        path.write_text(path.read_text().replace("Algorithm[DittoParams]",
                                                 "Algorithm[FedProxParams]"))

    done = _validate(tmp_path, "ditto", rebind)

    assert done.returncode == 2, done.stderr
    assert ("the registered class in pflpipe/algorithms/ditto.py is configured by FedProxParams; "
            "subclass Algorithm[DittoParams] instead") in done.stderr


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_every_shipped_algorithm_passes_the_registration_check(name):
    assert problem(name) is None


def test_params_models_names_the_fix_for_a_module_without_a_params_model():
    found, why = params_models("fedx", [int, str], "pflpipe.spec.algorithms.fedx_params")

    assert found == {}
    assert why == ("pflpipe/spec/algorithms/fedx_params.py defines no params model; define a "
                   "subclass "
                   'of FederatedParams (or StandaloneParams) with `name: Literal["fedx"]`')
