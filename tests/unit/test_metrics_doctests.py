"""Run the doctests of the metrics modules (each metric's docstring holds an exact example)."""

import doctest
import importlib

import pytest

MODULES = ["pflpipe.metrics.performance", "pflpipe.metrics.fairness",
           "pflpipe.metrics.generalization", "pflpipe.metrics.uncertainty",
           "pflpipe.metrics.pairwise", "pflpipe.report.pairwise_section",
           "pflpipe.metrics.inversion"]


@pytest.mark.parametrize("name", MODULES)
def test_metric_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_every_registered_metric_has_a_doctest():
    from pflpipe.metrics import METRIC_REGISTRY

    for metric in METRIC_REGISTRY.values():
        assert ">>>" in (metric.fn.__doc__ or ""), metric.name
