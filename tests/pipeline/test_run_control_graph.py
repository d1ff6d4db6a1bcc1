"""The graph under run control: tasks at once, FedAvg-only specs, the models a run trains."""

import os

import pytest
import yaml

from pflpipe.cli import UsageError
from pflpipe.cli.run_verb import with_run_control
from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.pipelines.graph import model_names, parallelism
from pflpipe.spec import parse_spec

BASE = """\
experiment: {{name: t, seeds: {seeds}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
personalization: {entries}
engine: {engine}
"""


def spec_of(seeds="[0]", entries="[{name: persfl}, {name: fedper}, {name: ditto}]",
            engine="{}"):
    return parse_spec(BASE.format(seeds=seeds, entries=entries, engine=engine))


def loops(spec, tmp_path) -> dict[str, int]:
    """ParallelFor parallelism limits by loop task name (0: none) in the compiled IR."""
    ir = next(yaml.safe_load_all(compile_pipeline(spec, tmp_path / "p.yaml").read_text()))
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    return {name: task.get("iteratorPolicy", {}).get("parallelismLimit", 0)
            for dag in dags for name, task in dag["tasks"].items()
            if "parameterIterator" in task}


def tasks(spec, tmp_path) -> set[str]:
    ir = next(yaml.safe_load_all(compile_pipeline(spec, tmp_path / "p.yaml").read_text()))
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    return {name for dag in dags for name in dag["tasks"]}


@pytest.mark.parametrize(("seeds", "limit", "expected"), [
    ("[0]", 2, (1, 2)),         # one seed: its personalize tasks two at a time
    ("[0, 1, 2]", 2, (2, 1)),   # seeds two at a time, each one personalize task at a time
    ("[0, 1]", 5, (2, 2)),      # 2 × 2 ≤ 5
    ("[0, 1]", None, (0, 0)),   # no limit: as many as the runner allows
])
def test_parallel_tasks_bound_the_tasks_running_at_once(seeds, limit, expected):
    engine = "{}" if limit is None else f"{{parallel_tasks: {limit}}}"

    assert parallelism(spec_of(seeds=seeds, engine=engine)) == expected


def test_parallel_tasks_reach_the_compiled_loops(tmp_path):
    limits = loops(spec_of(seeds="[0, 1, 2]", engine="{parallel_tasks: 2}"), tmp_path)

    assert sorted(limits.values()) == [1, 2]


def test_fedavg_only_spec_has_no_local_baseline_and_no_personalization(tmp_path):
    spec = spec_of(entries="[]")

    names = tasks(spec, tmp_path)

    assert model_names(spec) == ["fedavg"]
    assert {"partition-data", "warm-start-fedavg", "collect-results"} <= names
    assert not names & {"train-local", "personalize", "select-teachers"}


def test_model_names_list_each_model_once():
    spec = spec_of(entries="[{name: local, epochs: 5}, {name: persfl}, {name: fedper}, "
                           "{name: fedper, label: fedper-slow, lr: 0.01}]")

    assert model_names(spec) == ["fedavg", "local", "persfl", "fedper", "fedper-slow"]


def test_run_control_defaults_share_the_cores_between_the_tasks_at_once():
    cores = len(os.sched_getaffinity(0))

    engine = with_run_control(spec_of()).engine
    given = with_run_control(spec_of(engine="{threads: 3}"), parallel=1).engine

    assert engine.parallel_tasks == min(2, cores)
    assert engine.threads == max(1, cores // engine.parallel_tasks)
    assert (given.threads, given.parallel_tasks) == (3, 1)


def test_run_control_rejects_a_count_below_one():
    with pytest.raises(UsageError, match="--threads must be 1 or more"):
        with_run_control(spec_of(), threads=0)
