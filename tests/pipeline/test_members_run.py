"""`engine.seeds_as_members` through `pflpipe run`, when train_members trains every task of the
seeds: the seeds loop starts one collect_members task per seed and nothing else, and every seed's
collected results are the per-seed pipeline's, byte for byte.

Two real runs on the local runner into one output directory (so the checkpoint stores that the
warm start's summary names are the same): per seed, then grouped with --fresh. Between them the
per-seed run again, which takes every training task from kfp's cache and names each by its entry
and seed.
"""

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = """\
experiment: {{name: members-run, output_dir: {out}, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
engine: {{seeds_as_members: {on}}}
distillation: {{lambdas: [0.0, 0.5], temperatures: [1.0, 4.0], epochs: 1}}
personalization:
  - {{name: local, epochs: 2}}
  - {{name: persfl}}
  - {{name: fedper, rounds: 2}}
"""
#: Where the seed's partition and checkpoints were: train_members' output, or the seed's tasks.
WHERE = "sources.json"


def _run(work: Path, on: bool, *options: str) -> tuple[str, Path]:
    spec = work / f"spec-{on}.yaml"
    spec.write_text(SPEC.format(out=work / "results", on=str(on).lower()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run([str(Path(sys.executable).with_name("pflpipe")), "run", str(spec),
                           *options], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, (work / "results" / "latest").resolve()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(per seed, grouped, the per-seed run again from the cache)."""
    work = tmp_path_factory.mktemp("members-run")
    apart = _run(work, False)   # into a new directory: no --fresh, which would cache nothing
    again = _run(work, False)
    return apart, _run(work, True, "--fresh"), again


def _tasks(output: str) -> list[str]:
    return re.findall(r"^\s+[✓↺]\s(\S+)", output, re.M)


def test_the_seeds_loop_starts_only_a_collect_members_task_per_seed(runs):
    (apart, _), (together, _), _ = runs
    assert sorted(_tasks(together)) == ["collect_members", "collect_members",
                                        "evaluate_fairness", "train_members"]
    assert len(_tasks(apart)) == 2 * 7 + 1   # per seed: 6 stages and collect_results


def test_every_seeds_collected_results_are_the_per_seed_pipelines_to_the_byte(runs):
    (_, apart), (_, together), _ = runs
    assert apart != together
    for seed in (0, 1):
        a, b = (
            {p.relative_to(root): p for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != WHERE}
            for root in (apart / f"seed-{seed}", together / f"seed-{seed}"))
        assert sorted(a) == sorted(b)
        assert {p.parts[0] for p in a} >= {"fedavg", "local", "persfl", "fedper"}
        different = [name for name in a if not filecmp.cmp(a[name], b[name], shallow=False)]
        assert not different, f"seed {seed}: {different}"


def test_a_rerun_names_each_cached_task_by_its_entry_and_seed(runs):
    *_, (again, _) = runs
    cached = [" ".join(line.split()[1:-1]) for line in again.splitlines()
              if line.strip().startswith("↺") and line.rstrip().endswith(" cached")]

    assert sorted(cached) == sorted(f"{stage} · seed {seed}" for seed in (0, 1) for stage in (
        "partition_data", "warm_start_fedavg", "train_local", "select_teachers",
        "distill_grid_search", "personalize[fedper]"))
