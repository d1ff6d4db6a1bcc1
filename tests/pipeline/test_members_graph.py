"""`engine.seeds_as_members` in the graph: one train_members task before the seeds loop, which
every seed's partition_data follows; the loop's tasks keep their inputs (and so cache keys).
When it trains every task of the seeds, the loop starts only a collect_members task per seed."""

from pathlib import Path

import yaml

from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.spec import parse_spec

SPEC = """\
experiment: {{name: members-graph, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
engine: {{seeds_as_members: {on}}}
personalization:
  - {{name: persfl}}
  - {{name: fedper}}
"""


#: Early stopping keeps the warm start (and the entries after it) per seed: the loop trains.
EARLY_STOP = ("federation: {rounds: 2}", "federation: {rounds: 2, early_stop: {patience: 2}}")


def _ir(tmp_path: Path, on: bool, whole: bool = False) -> dict:
    text = SPEC.format(on=str(on).lower())
    if not whole:
        text = text.replace(*EARLY_STOP)
    path = compile_pipeline(parse_spec(text), tmp_path / f"{on}-{whole}.yaml")
    return next(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def _tasks(ir: dict) -> dict[str, dict]:
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    return {name: task for dag in dags for name, task in dag["tasks"].items()}


def test_seeds_as_members_adds_one_task_that_the_seeds_loop_follows(tmp_path):
    tasks = _tasks(_ir(tmp_path, True))

    assert "train-members" in tasks
    loop = next(t for name, t in _tasks(_ir(tmp_path, True)).items()
                if name.startswith("for-loop") and "train-members" in t.get("dependentTasks", []))
    assert loop is not None
    assert "train-members" not in _tasks(_ir(tmp_path, False))


def test_seeds_as_members_leaves_every_other_task_its_inputs(tmp_path):
    # the specs the loop's tasks receive are the same: their cache keys do not change (their
    # resume is "all": train_members applied the run's --fresh / --no-cache)
    on, off = _tasks(_ir(tmp_path, True)), _tasks(_ir(tmp_path, False))

    def constants(task):
        return {k: v for k, v in task.get("inputs", {}).get("parameters", {}).items()
                if "runtimeValue" in v and k != "resume"}

    assert set(on) - set(off) == {"train-members"}
    for name in off:
        assert constants(on[name]) == constants(off[name]), name


def test_a_tuning_grid_gets_a_train_members_task_the_tuning_seeds_loop_follows(tmp_path):
    # the tuning seeds' warm starts and grid points train as members before their loop
    text = SPEC.format(on="true") + (
        "tuning: {seeds: [7], entries: [{entry: fedper, grid: {local_epochs: [1, 2]}}]}\n")
    path = compile_pipeline(parse_spec(text), tmp_path / "tuned.yaml")
    tasks = _tasks(next(yaml.safe_load_all(path.read_text(encoding="utf-8"))))

    members = sorted(name for name in tasks if name.startswith("train-members"))
    followers = {dep for task in tasks.values() for dep in task.get("dependentTasks", [])
                 if dep.startswith("train-members")}
    assert len(members) == 2 and followers == set(members)
    tuning_loop = next(t for t in tasks.values() if t.get("taskInfo", {}).get("name") ==
                       "for each tuning seed")
    assert set(tuning_loop["dependentTasks"]) & set(members)


def test_when_train_members_trains_every_task_the_seeds_loop_only_collects(tmp_path):
    # persfl's teachers and grid, fedper and the local baseline all train as members: no task
    # of the loop would train anything, so none is started
    ir = _ir(tmp_path, True, whole=True)
    tasks = _tasks(ir)

    assert sorted(tasks) == ["collect-members", "evaluate-fairness", "for-loop-2",
                             "train-members"]
    assert tasks["train-members"]["inputs"]["parameters"]["whole"] == {
        "runtimeValue": {"constant": True}}
    assert "members" in tasks["collect-members"]["inputs"]["artifacts"]   # run: test_members_run
    assert "whole" not in _tasks(_ir(tmp_path, True))["train-members"]["inputs"]["parameters"]
