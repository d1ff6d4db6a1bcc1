"""Run the docstring examples of the data generator's modules."""

import doctest
import importlib

import pytest

MODULES = ["pflpipe.data.allocation", "pflpipe.data.client_split", "pflpipe.data.skews",
           "pflpipe.stages.partition_data"]


@pytest.mark.parametrize("name", MODULES)
def test_data_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name))

    assert result.attempted > 0 and result.failed == 0
