"""`python -m pflpipe.pipelines.image_check`, the last step of both image builds.

Here it runs in this environment (which can run every stage); the failures it exists for are
made by breaking one thing at a time: a module that does not import, a torchvision whose
operators are not registered for this torch. The builds themselves: tests/server/test_containers.py.
"""

import subprocess
import sys

import pytest
import torch
import torchvision

from pflpipe.pipelines import image_check


def test_this_environment_passes_and_the_report_says_what_it_checked():
    report = image_check.check()

    assert report.torch == torch.__version__ and report.torchvision == torchvision.__version__
    assert report.modules == len(image_check.module_names()) > 150
    assert report.fonts > 0
    assert str(report).startswith(f"image check: {report.modules} modules import; torch "
                                  f"{torch.__version__}, torchvision {torchvision.__version__} "
                                  "(nms runs), gloo available; ")


def test_every_module_of_the_packages_and_every_declared_dependency_is_imported():
    names = image_check.module_names()

    for name in ("pflpipe.stages.distill_grid_search", "pflpipe.components.personalize",
                 "pflpipe.pipelines.graph", "pflpipe.cli.run_verb", "kfp.dsl.executor_main",
                 "matplotlib.pyplot", "torchvision.ops"):
        assert name in names, name
    assert {"torch", "torchvision", "kfp", "mlflow", "pydantic", "boto3", "yaml", "numpy",
            "matplotlib", "rich", "filelock", "sklearn", "pandas", "docker"} <= set(
        image_check.dependency_modules())
    assert "pytest" not in names and "moto" not in names   # the dev extra is not the image's


def test_a_module_that_does_not_import_fails_the_check_by_name(monkeypatch):
    monkeypatch.setattr(image_check, "RUNTIME", (*image_check.RUNTIME, "pflpipe_absent_module"))

    with pytest.raises(image_check.ImageCheckFailed,
                       match="^import pflpipe_absent_module fails: ModuleNotFoundError: No "
                             "module named 'pflpipe_absent_module'$"):
        image_check.check()


def test_a_torchvision_built_for_another_torch_fails_the_check(monkeypatch):
    def unregistered(*args, **kwargs):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(torchvision.ops, "nms", unregistered)

    with pytest.raises(image_check.ImageCheckFailed) as failed:
        image_check.check()
    assert str(failed.value) == (
        f"torchvision {torchvision.__version__} does not run with torch {torch.__version__} "
        "(torchvision.ops.nms: operator torchvision::nms does not exist); install the "
        "torchvision built for this torch")


def test_the_command_exits_1_with_one_line_on_failure():
    done = subprocess.run([sys.executable, "-c",
                           "import sys; from pflpipe.pipelines import image_check as c; "
                           "c.PACKAGES, c.RUNTIME = (), ('pflpipe_absent_module',); "
                           "c.dependency_modules = list; sys.exit(c.main())"],
                          capture_output=True, text=True, timeout=300)

    assert done.returncode == 1
    assert done.stderr == ("image check failed: import pflpipe_absent_module fails: "
                           "ModuleNotFoundError: No module named 'pflpipe_absent_module'\n")
