"""benchmarks/protocol.py: task times read from `pflpipe run`'s lines, extrapolated by hand."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = """\
protocol-ds1-members: arrays, 10 clients, seeds [0, 1], algorithms fedavg, local, persfl
  ✓ train_members                               50.0 s  1 torch thread
  ↺ partition_data · seed 0                     10.0 s  reused
  ✓ warm_start_fedavg · seed 1                   8.0 s  1 torch thread
  ↺ warm_start_fedavg · seed 0                  12.0 s  1 torch thread; reused
  ✓ distill_grid_search · seed 0                30.5 s  1 torch thread
  ✓ personalize[per_fedavg] · seed 0           10.0 s  1 torch thread
  ✓ evaluate_fairness                           20.0 s  warning: Unequal compute: 15× the 1.5 s
done in 243 s
"""
FACTORS = {"rounds": 10.0, "epochs": 10.0, "pool": 4.0}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("protocol_bench",
                                                  REPO / "benchmarks" / "protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_task_lines_are_read_with_their_seed_and_seconds(bench):
    tasks = [(title, float(s)) for title, s in bench.TASK_LINE.findall(CLI)]
    assert tasks == [("train_members", 50.0), ("partition_data · seed 0", 10.0),
                     ("warm_start_fedavg · seed 1", 8.0), ("warm_start_fedavg · seed 0", 12.0),
                     ("distill_grid_search · seed 0", 30.5),
                     ("personalize[per_fedavg] · seed 0", 10.0), ("evaluate_fairness", 20.0)]
    assert bench.by_stage(tasks)["warm_start_fedavg"] == (20.0, 2)


def test_extrapolation_keeps_the_fixed_cost_and_scales_the_rest(bench):
    # warm start, 2 tasks of 30 s together, 10 s fixed each: 20 s + 10 s of work × 10 rounds × 4
    assert bench.scale("warm_start_fedavg", 30.0, 2, 10.0, FACTORS) == pytest.approx(420.0)
    # the grid: 10 s + 5 s of work × 10 epochs × 4 pool
    assert bench.scale("distill_grid_search", 15.0, 1, 10.0, FACTORS) == pytest.approx(210.0)
    # the local baseline trains its epochs at any rounds: the pool alone
    assert bench.scale("train_local", 15.0, 1, 10.0, FACTORS) == pytest.approx(30.0)
    # tracking and the report do not grow with the data; a part of train_members has no fixed
    assert bench.scale("evaluate_fairness", 20.0, 1, 10.0, FACTORS) == 20.0
    assert bench.scale("  personalize[fedper]", 2.0, 0, 0.0, FACTORS) == pytest.approx(80.0)


def test_walls_grow_by_the_loops_extra_over_two_and_the_grouped_tasks_in_full(bench):
    apart = {"wall": 100.0, "tasks": [("warm_start_fedavg · seed 0", 12.0),
                                      ("warm_start_fedavg · seed 1", 12.0)], "inner": {}}
    together = {"wall": 60.0, "tasks": [("train_members", 30.0),
                                        ("warm_start_fedavg · seed 0", 10.0),
                                        ("warm_start_fedavg · seed 1", 10.0)],
                "inner": {"  warm_start_fedavg": 3.0}}
    rows, total = bench.split_rows("ds1", {False: apart, True: together}, FACTORS)
    assert total["fixed"] == 10.0
    # per seed: (24 - 20) × 39 = 156 extra task seconds, 2 at once; grouped: 3 × 39 in full
    assert total["full"] == pytest.approx([100.0 + 78.0, 60.0 + 117.0])
    assert ("ds1", "  warm_start_fedavg", None, None, 3.0, pytest.approx(120.0)) in rows


def test_work_done_the_same_both_ways_is_extrapolated_once_from_the_mean(bench):
    # the grid runs per seed in both: 30 s and 20 s measured (the load moved), 10 s fixed
    grid = [("distill_grid_search · seed 0", 30.0)], [("distill_grid_search · seed 0", 20.0)]
    runs = {m: {"wall": 100.0, "tasks": list(grid[m]), "inner": {}} for m in (0, 1)}
    runs[True]["tasks"].append(("warm_start_fedavg · seed 0", 10.0))
    rows, _ = bench.split_rows("ds1", {False: runs[0], True: runs[1]}, FACTORS)
    # the mean, 25 s: 15 s of work × 40 more: each run's own seconds + 585
    assert rows[0] == ("ds1", "distill_grid_search", 30.0, pytest.approx(615.0), 20.0,
                       pytest.approx(605.0))


def test_without_idle_tasks_the_fixed_cost_is_the_shortest_per_seed_training_task(bench):
    # train_members trained everything: the grouped run's seeds loop only collected
    apart = {"wall": 100.0, "inner": {}, "tasks": [
        ("partition_data · seed 0", 2.0), ("warm_start_fedavg · seed 0", 9.0),
        ("personalize[fedper] · seed 0", 7.0), ("evaluate_fairness", 3.0)]}
    together = {"wall": 60.0, "inner": {}, "tasks": [("train_members", 30.0),
                                                     ("collect_members · seed 0", 1.0)]}
    assert bench.fixed_cost({False: apart, True: together}) == 7.0
