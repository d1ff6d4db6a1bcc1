"""PersFL's teachers and distillation grid as members: train_members trains every seed's grid as
one job and keeps each in its seed's store; each seed's distill_grid_search task then trains
nothing and writes every file its own grid would have written, byte for byte."""

import filecmp
import json
from pathlib import Path

import pytest

from pflpipe.pipelines.cache import members_specs_json, scoped_spec_json
from pflpipe.spec import Spec, parse_spec
from pflpipe.stages import distill_grid_search, partition_data, select_teachers, train_members
from pflpipe.stages import warm_start_fedavg as warm_start

SEEDS = [0, 1]
SPEC = """\
experiment: {{name: members-distill, output_dir: {out}, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 3}}
engine: {{compile: false}}
distillation: {{lambdas: [0.0, 0.5, 1.0], temperatures: [1.0, 4.0], epochs: 2}}
personalization:
  - {{name: persfl}}
"""


def _files(root: Path) -> dict[Path, Path]:
    return {p.relative_to(root): p for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_same_files(alone: Path, together: Path, at_least: int = 11) -> None:
    # a grid's: results, history, summary, grid, chosen, teachers, 2 figures, 4 client models
    a, b = _files(alone), _files(together)
    assert sorted(a) == sorted(b)
    assert len(a) >= at_least
    different = [name for name in a if not filecmp.cmp(a[name], b[name], shallow=False)]
    assert not different, f"{together}: {different}"


def _scoped(spec, stage: str):
    return Spec.model_validate_json(scoped_spec_json(spec, stage))


def _per_seed(spec, root: Path, checkpoints: dict[int, Path], out: str) -> None:
    """Each seed's select_teachers and distill_grid_search tasks, as the seeds loop runs them."""
    for seed in SEEDS:
        teachers = root / f"{out}/teachers{seed}"
        select_teachers.run(_scoped(spec, "select_teachers"), checkpoints[seed], teachers)
        distill_grid_search.run(_scoped(spec, "distill_grid_search"), seed,
                                root / f"{out}/partition{seed}", checkpoints[seed], teachers,
                                root / f"{out}/persfl{seed}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every seed alone (stores of its own), then train_members and the seeds' tasks after it."""
    alone_root, grouped_root = (tmp_path_factory.mktemp(name) for name in ("alone", "grouped"))
    alone = parse_spec(SPEC.format(out=alone_root))
    for seed in SEEDS:
        part = alone_root / f"alone/partition{seed}"
        partition_data.run(_scoped(alone, "partition_data"), seed, part)
        warm_start.run(_scoped(alone, "warm_start_fedavg"), seed, part,
                       alone_root / f"alone/checkpoints{seed}", alone_root / f"alone/fedavg{seed}")
    _per_seed(alone, alone_root, {s: alone_root / f"alone/checkpoints{s}" for s in SEEDS},
              "alone")

    grouped = parse_spec(SPEC.format(out=grouped_root))
    specs = {k: Spec.model_validate(v) for k, v in json.loads(members_specs_json(grouped)).items()}
    result = train_members.run(specs, grouped_root / "members")
    members = {s: grouped_root / f"members/seed-{s}" for s in SEEDS}
    for seed in SEEDS:   # the seeds loop's partitions (the same files as train_members')
        partition_data.run(_scoped(grouped, "partition_data"), seed,
                           grouped_root / f"loop/partition{seed}")
    return alone_root, grouped_root, grouped, members, result


def test_train_members_groups_the_teachers_and_the_grid_after_the_warm_start(runs):
    *_, result = runs
    assert result.grouped == ["warm_start_fedavg", "train_local", train_members.DISTILL]
    assert result.per_seed == {}


def test_the_grids_as_members_write_every_file_of_each_seeds_own_grid_to_the_byte(runs):
    # two seeds, two partitions, two sets of teachers: a seed's students trained with the other
    # seed's data, teachers or mini-batch orders, or kept in its store, would differ here
    alone_root, _, _, members, _ = runs
    for seed in SEEDS:
        _assert_same_files(alone_root / f"alone/persfl{seed}",
                           members[seed] / "distill_grid_search")
        _assert_same_files(alone_root / f"alone/teachers{seed}", members[seed] / "select_teachers",
                           at_least=3)
    a, b = (json.loads((root / "select_teachers/teachers.json").read_text())["teachers"]
            for root in members.values())
    assert a != b   # the seeds' teachers differ, so a swap of seeds cannot go unseen


def test_each_seeds_task_after_train_members_trains_nothing_and_writes_the_same_files(
        runs, capsys):
    alone_root, grouped_root, grouped, members, _ = runs
    capsys.readouterr()
    _per_seed(grouped, grouped_root, {s: members[s] / "checkpoints" for s in SEEDS}, "loop")

    assert capsys.readouterr().out.count("reused the grid its seeds trained as members") == 2
    for seed in SEEDS:
        _assert_same_files(alone_root / f"alone/persfl{seed}", grouped_root / f"loop/persfl{seed}")


def test_an_ungrouped_seed_finds_no_kept_grid_and_trains_its_own(runs, capsys):
    # the per-seed pipeline is unchanged: nothing was kept in its stores, so each task trained
    alone_root, *_ = runs
    stores = alone_root / "checkpoints" / distill_grid_search.STAGE
    assert not stores.exists()


def test_validate_names_the_teachers_and_the_grid_as_grouped(tmp_path):
    spec = parse_spec(SPEC.format(out=tmp_path))
    grouped, per_seed = train_members.groups(spec)
    assert grouped == ["warm_start_fedavg", "train_local", train_members.DISTILL]
    early = parse_spec(SPEC.format(out=tmp_path).replace("rounds: 3",
                                                          "rounds: 3, early_stop: {patience: 2}"))
    assert train_members.groups(early)[1][train_members.DISTILL] == (
        "it starts from the warm start, which trains per seed")


def test_validate_says_the_seeds_loop_only_collects(tmp_path, capsys):
    from pflpipe.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(out=tmp_path).replace("engine: {compile: false}",
                                                      "engine: {compile: false, "
                                                      "seeds_as_members: true}"))
    assert main(["validate", str(path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("  train_members"))
    assert line.startswith("  train_members       warm_start_fedavg, train_local, "
                           "select_teachers, distill_grid_search: the 2 seeds as members")
    assert line.endswith("(the loop then only collects each seed's results from it)")


def test_what_cannot_train_as_members_in_a_whole_run_trains_seed_by_seed_into_the_same_files(
        runs, tmp_path):
    # train_members' fallback when the seeds loop only collects (`whole`): each unit's seeds
    # one by one, into the folders collect_members reads
    _, _, grouped, members, _ = runs
    specs = {k: Spec.model_validate(v) for k, v in json.loads(members_specs_json(grouped)).items()}
    dirs = {s: tmp_path / f"seed-{s}" for s in SEEDS}
    units = [["warm_start_fedavg"], ["train_local"], [train_members.DISTILL]]
    for unit in units:
        train_members._train_alone(unit, specs, SEEDS, [members[s] / "partition" for s in SEEDS],
                                   [dirs[s] / "checkpoints" for s in SEEDS], dirs, "all")
    for seed in SEEDS:
        _, _, results = train_members.seed_results(grouped, tmp_path, seed)
        assert [p.name for p in results] == ["warm_start_fedavg", "train_local",
                                             "distill_grid_search"]
        for path in [*results, dirs[seed] / "select_teachers"]:
            _assert_same_files(members[seed] / path.name, path, at_least=3)
