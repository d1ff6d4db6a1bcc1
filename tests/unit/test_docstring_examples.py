"""Every docstring example in the modules no other runner covers holds.

The data, metrics and task log modules have runners of their own.
"""

import doctest
import importlib

import pytest

MODULES = ["pflpipe.distill.objective", "pflpipe.distill.teachers", "pflpipe.storage.s3",
           "pflpipe.tracking.runs", "pflpipe.tracking.scrub", "pflpipe.tracking.mlflow_store",
           "pflpipe.tracking.vocabulary",
           "pflpipe.spec.overrides", "pflpipe.report.score_curves", "pflpipe.training.score_rows",
           "pflpipe.training.stage_setup",
           "pflpipe.layout", "pflpipe.markdown",
           "pflpipe.spec.algorithms.params", "pflpipe.stages.evaluate_fairness",
           "pflpipe.compute.in_all", "pflpipe.compute.totals",
           "pflpipe.report.stability_section", "pflpipe.cli.data_preview", "pflpipe.api",
           "pflpipe.disk"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)

    assert result.attempted > 0 and result.failed == 0
