"""A sweep compiles to one pipeline: every point × seed, the stages a point does not change once.

The golden file ``tests/pipeline/golden/sweep-digits.yaml`` is the compiled `SWEEP` spec (what
`pflpipe submit` sends); regenerate it after an intended change of the graph and review the diff::

    PFLPIPE_REGEN_GOLDEN=1 python -m pytest tests/pipeline/test_sweep_graph.py -k golden
"""

import collections
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from test_compile import normalise

from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.pipelines.tasklog import TaskLog
from pflpipe.spec import parse_spec
from pflpipe.spec.sweep import points

GOLDEN = Path(__file__).parent / "golden" / "sweep-digits.yaml"
SWEEP = """\
experiment: {name: sweep-digits, seeds: [0, 1]}
dataset: {name: digits}
partition: {strategy: ds2, n_clients: 4, alpha: 0.5}
federation: {rounds: 2}
personalization: [{name: fedper}, {name: ditto}]
sweep:
  personalization.ditto.lam: [0.01, 1.0]
"""


def tasks_per_stage(text: str, tmp_path: Path) -> collections.Counter:
    """How many tasks of each stage the compiled pipeline holds (loop bodies included)."""
    ir = next(yaml.safe_load_all(compile_pipeline(parse_spec(text), tmp_path / "p.yaml")
                                 .read_text(encoding="utf-8")))
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    return collections.Counter(
        re.sub(r"-\d+$", "", name).replace("-", "_") for dag in dags
        for name, task in dag["tasks"].items()
        if "executorLabel" in ir["components"][task["componentRef"]["name"]])


def test_sweeping_a_personalization_setting_shares_partition_warm_start_and_local(tmp_path):
    counts = tasks_per_stage(SWEEP, tmp_path)

    assert counts["partition_data"] == 1          # one per seed (the seeds loop)
    assert counts["warm_start_fedavg"] == 1
    assert counts["train_local"] == 1
    assert counts["personalize"] == 2             # each point's loop over its entries
    assert counts["collect_results"] == 2
    assert counts["evaluate_fairness"] == 2


def test_sweeping_the_partition_shares_nothing_but_the_seeds_loop(tmp_path):
    text = SWEEP.replace("personalization.ditto.lam: [0.01, 1.0]",
                         "partition: [{strategy: ds1}, {strategy: ds2, alpha: 0.9}, "
                         "{strategy: ds3}]")

    counts = tasks_per_stage(text, tmp_path)

    assert {stage: counts[stage] for stage in ("partition_data", "warm_start_fedavg",
                                               "train_local", "evaluate_fairness")} == \
        {"partition_data": 3, "warm_start_fedavg": 3, "train_local": 3, "evaluate_fairness": 3}


def test_sweeping_the_rounds_shares_the_partition_only(tmp_path):
    counts = tasks_per_stage(SWEEP.replace("personalization.ditto.lam", "federation.rounds")
                             .replace("[0.01, 1.0]", "[1, 2]"), tmp_path)

    assert (counts["partition_data"], counts["warm_start_fedavg"], counts["train_local"]) == \
        (1, 2, 2)


def test_each_points_tasks_receive_the_points_own_spec(tmp_path):
    """A point's tasks have the inputs of the point's spec run alone: the same cache keys."""
    path = compile_pipeline(parse_spec(SWEEP), tmp_path / "p.yaml")
    constants = set(strings(next(yaml.safe_load_all(path.read_text(encoding="utf-8")))))

    for point in points(parse_spec(SWEEP)):
        assert scoped_spec_json(point.spec, "personalize", "ditto") in constants
        assert scoped_spec_json(point.spec, "warm_start_fedavg") in constants


def strings(node):
    """Every string in the IR, those in loop items (a JSON list) included."""
    if isinstance(node, str) and node.startswith("[{"):
        node = json.loads(node)
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def test_a_points_evaluate_fairness_task_is_titled_by_its_point():
    task = TaskLog("evaluate_fairness")

    task.take({"event": "started", "stage": "evaluate_fairness", "sweep_point": "alpha=0.1"})

    assert task.title == "evaluate_fairness[alpha=0.1]"


def test_golden_ir_of_a_sweep(tmp_path):
    compiled = compile_pipeline(parse_spec(SWEEP), tmp_path / "sweep-digits.yaml").read_text(
        encoding="utf-8")
    if os.environ.get("PFLPIPE_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(compiled, encoding="utf-8")

    if normalise(compiled) != normalise(GOLDEN.read_text(encoding="utf-8")):
        pytest.fail("the compiled sweep differs from tests/pipeline/golden/sweep-digits.yaml; if "
                    "the change is intended, regenerate it with PFLPIPE_REGEN_GOLDEN=1 and review "
                    "the diff", pytrace=False)
