"""The sweep report from hand-made point reports: the table, the figure, the links, the doctests."""

import doctest
import importlib
import json

import pytest

from pflpipe import layout
from pflpipe.report.sweep_report import (
    SWEEP_PNG,
    PointReport,
    numeric_setting,
    write_sweep_report,
)


def report(means: dict[str, float], winner: str | None) -> dict:
    """A point's report.json as evaluate_fairness writes it, reduced to what the sweep reads."""
    return {"primary_split": "test",
            "models": {m: {"performance": {"AA": v}} for m, v in means.items()},
            "splits": {"test": {"uncertainty": {"intervals": {
                m: {"performance.AA": {"low": v - 0.05, "high": v + 0.05}}
                for m, v in means.items()}}}},
            "verdicts": {"best": {"leader": "ditto", "winner": winner, "top": ["ditto", "fedper"],
                                  "pairs": [{"a": "ditto", "b": "fedper", "resolved": bool(winner),
                                             "ahead": winner, "p_holm": 0.004}]}}}


POINTS = [PointReport("alpha=0.1", {"partition.alpha": 0.1},
                      report({"fedavg": 0.5, "fedper": 0.8, "ditto": 0.9}, "ditto"),
                      "../points/alpha=0.1/report"),
          PointReport("alpha=10.0", {"partition.alpha": 10.0},
                      report({"fedavg": 0.9, "fedper": 0.85, "ditto": 0.86}, None),
                      "../points/alpha=10.0/report")]


@pytest.mark.parametrize("name", ["pflpipe.report.sweep_report", "pflpipe.spec.sweep"])
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name))

    assert result.attempted > 0 and result.failed == 0


def test_sweep_report_tables_every_point_with_intervals_and_verdicts(tmp_path):
    write_sweep_report(POINTS, tmp_path, "t: sweep of 2 points")

    markdown = (tmp_path / layout.REPORT_MD).read_text()
    assert "| point | fedavg | fedper | ditto | the data separate |" in markdown
    assert ("| alpha=0.1 | 0.5000 [0.4500, 0.5500] | 0.8000 [0.7500, 0.8500] | "
            "0.9000 [0.8500, 0.9500] | ditto best; ditto ahead of fedper (p_holm 0.004) |"
            ) in markdown
    assert "| alpha=10.0 | 0.9000 [0.8500, 0.9500] | 0.8500 [0.8000, 0.9000] | " \
           "0.8600 [0.8100, 0.9100] | ditto and fedper not separated |" in markdown
    assert "- [alpha=0.1](../points/alpha=0.1/report/report.html)" in markdown
    facts = json.loads((tmp_path / layout.SWEEP_JSON).read_text())
    assert facts["points"][1]["models"]["fedper"] == {"mean": 0.85, "low": 0.85 - 0.05,
                                                      "high": 0.85 + 0.05}


def test_a_numeric_sweep_gets_its_figure_and_a_categorical_one_none(tmp_path):
    write_sweep_report(POINTS, tmp_path / "alpha", "t")
    categorical = [PointReport("partition=ds1", {"partition": {"strategy": "ds1"}}, p.report,
                               p.folder) for p in POINTS]
    write_sweep_report(categorical, tmp_path / "strategy", "t")

    png = (tmp_path / "alpha" / SWEEP_PNG).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert numeric_setting(POINTS) == "partition.alpha"
    assert numeric_setting(categorical) is None
    assert not (tmp_path / "strategy" / layout.FIGURES).exists()
