"""Client shards: the local baseline, the distillation grid and a personalize entry whose clients
train alone (fedavg_ft) run per shard, then merged, equal the unsharded stages.

Every stage runs in-process on digits (5 clients of different sizes, 3 shards of 1–2 clients);
then one real `pflpipe run` of the sharded graph on the local runner (2 shards: 3 × 2 shard
tasks, 2 merges and fedavg_ft's merge in collect_results; fedper, federated, one task) against
the unsharded stages run in-process.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pflpipe import layout
from pflpipe.errors import DataError
from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.pipelines.graph import personalize_items
from pflpipe.spec import parse_spec, read_spec
from pflpipe.stages import (
    collect_results,
    distill_grid_search,
    merge_shards,
    partition_data,
    personalize,
    select_teachers,
    train_local,
    warm_start_fedavg,
)
from pflpipe.training import csv_tables

SPEC = """\
experiment: {{name: t, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds2, n_clients: 5, alpha: 0.5}}
federation: {{rounds: 3}}
personalization:
  - {{name: persfl}}
  - {{name: local, epochs: 3}}
  - {{name: fedavg_ft, epochs: 3}}
  - {{name: fedper, rounds: 2}}
distillation: {{epochs: 2, lambdas: [0.0, 0.5], temperatures: [1.0, 4.0]}}
engine: {{shards: 3, device: cpu, compile: false}}
tracking: {{enabled: false}}
"""
SHARDS = 3


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """Each stage unsharded (`<stage>`) and as 3 shards merged (`<stage>-merged`)."""
    work = tmp_path_factory.mktemp("shards")
    spec = parse_spec(SPEC.format(out=work / "results"))
    part, ckpt, teachers = work / "partition", work / "checkpoints", work / "teachers"
    partition_data.run(spec, 0, part)
    warm_start_fedavg.run(spec, 0, part, ckpt, work / "fedavg")
    select_teachers.run(spec, ckpt, teachers)
    train_local.run(spec, 0, part, work / "local")
    distill_grid_search.run(spec, 0, part, ckpt, teachers, work / "persfl")
    personalize.run(spec, 0, "fedavg_ft", part, ckpt, work / "fedavg_ft")
    for k in range(SHARDS):
        train_local.run(spec, 0, part, work / f"local-{k}", shard=k)
        distill_grid_search.run(spec, 0, part, ckpt, teachers, work / f"persfl-{k}", shard=k)
        personalize.run(spec, 0, "fedavg_ft", part, ckpt, work / f"fedavg_ft-{k}", shard=k)
    summaries = {stage: merge_shards.run([work / f"{stage}-{k}" for k in reversed(range(SHARDS))],
                                     work / f"{stage}-merged")
                 for stage in ("local", "persfl", "fedavg_ft")}
    return work, spec, summaries


def same_table(a: list[dict], b: list[dict]) -> None:
    """Equal rows in the same order: ids exactly, numbers within float tolerance."""
    assert len(a) == len(b) and len(a) > 0
    for row_a, row_b in zip(a, b, strict=True):
        assert row_a.keys() == row_b.keys()
        for key, value in row_a.items():
            try:
                x, y = float(value), float(row_b[key])
            except ValueError:
                assert value == row_b[key], key
                continue
            assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) or (
                math.isnan(x) and math.isnan(y)), (key, row_a, row_b)


def test_shards_are_contiguous_non_empty_and_hold_every_client(stages):
    work, _, _ = stages
    held = [csv_tables.read_csv(work / f"local-{k}" / "results.csv") for k in range(SHARDS)]

    clients = [sorted({int(r["client"]) for r in rows}) for rows in held]

    assert all(clients) and sum(clients, []) == list(range(5))


@pytest.mark.parametrize("stage, tables", [
    ("local", ("results.csv", "history.csv")),
    ("persfl", ("results.csv", "history.csv", "grid.csv", "chosen.csv", "teachers.csv")),
    ("fedavg_ft", ("results.csv", "history.csv"))])
def test_merged_shards_equal_the_unsharded_stage(stages, stage, tables):
    work, _, _ = stages
    whole, merged = work / stage, work / f"{stage}-merged"

    for table in tables:
        same_table(csv_tables.read_csv(whole / table), csv_tables.read_csv(merged / table))
    names = sorted(p.name for p in (whole / "models").iterdir())
    assert names == sorted(p.name for p in (merged / "models").iterdir())
    assert len(names) == 5
    for name in names:
        a = torch.load(whole / "models" / name, weights_only=True)
        b = torch.load(merged / "models" / name, weights_only=True)
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert (merged / "summary.md").read_text() == (whole / "summary.md").read_text()
    assert not (merged / layout.SHARD_JSON).exists()


def test_merged_persfl_keeps_its_figures(stages):
    work, _, summaries = stages
    merged = work / "persfl-merged"

    assert all((merged / name).stat().st_size > 0 for name in distill_grid_search.FIGURES)
    assert [c["client"] for c in summaries["persfl"].chosen] == list(range(5))


def test_persfl_counts_every_student_of_its_grid_as_its_training(stages):
    # 2 λ × 2 T students × 2 epochs = 8 passes over a client's data per client; the local
    # baseline's 3 epochs are 3: so 3·persfl = 8·local, client by client, sharded or not
    work, _, _ = stages
    for suffix in ("", "-merged"):
        samples = {model: {r["client"]: int(r["samples"]) for r in csv_tables.read_csv(
            work / f"{model}{suffix}" / "results.csv")} for model in ("persfl", "local")}
        assert samples["persfl"].keys() == samples["local"].keys()
        assert all(3 * samples["persfl"][c] == 8 * samples["local"][c] > 0
                   for c in samples["local"])
    epochs = [r for r in csv_tables.read_csv(work / "persfl" / "history.csv")
              if r["split"] == "train" and r["client"] == "0"]
    assert [(r["round"], r["samples"]) for r in epochs] == [
        ("0", ""), ("1", str(samples["persfl"]["0"] // 2)), ("2", str(samples["persfl"]["0"] // 2))]


def test_collect_results_merges_a_models_shards_into_its_unsharded_directory(stages, tmp_path):
    work, spec, _ = stages
    whole = collect_results.run(spec, 0, [work / "fedavg", work / "fedavg_ft"], tmp_path / "whole")

    merged = collect_results.run(
        spec, 0, [work / "fedavg", *(work / f"fedavg_ft-{k}" for k in (2, 0, 1))],
        tmp_path / "merged")

    assert list(merged.test_accuracy) == list(whole.test_accuracy) == ["fedavg", "fedavg_ft"]
    for model, accuracy in whole.test_accuracy.items():
        assert math.isclose(merged.test_accuracy[model], accuracy, rel_tol=1e-6)
    for table in ("results.csv", "fedavg_ft/results.csv", "fedavg_ft/history.csv"):
        same_table(csv_tables.read_csv(tmp_path / "whole" / table),
                   csv_tables.read_csv(tmp_path / "merged" / table))
    files = [sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))
             for d in (tmp_path / "whole" / "fedavg_ft", tmp_path / "merged" / "fedavg_ft")]
    assert files[0] == files[1] and layout.SHARD_JSON not in files[1]
    assert ((tmp_path / "merged" / "collected.json").read_text()
            == (tmp_path / "whole" / "collected.json").read_text())


def test_a_federated_entry_refuses_to_run_as_a_shard(stages, tmp_path):
    work, spec, _ = stages

    with pytest.raises(DataError, match="fedper's clients communicate, so it cannot run as a "
                                        "client shard"):
        personalize.run(spec, 0, "fedper", work / "partition", work / "checkpoints",
                        tmp_path / "x", shard=0)


def test_a_missing_shard_is_named(stages, tmp_path):
    work, _, _ = stages

    with pytest.raises(DataError, match="starts at client .*end at client"):
        merge_shards.run([work / "local-0", work / "local-2"], tmp_path / "out")
    last = r"the last ends at client 3, and there are 5 clients \(0–4\)"   # shard 2 is missing
    with pytest.raises(DataError, match=last):
        merge_shards.run([work / "local-1", work / "local-0"], tmp_path / "out")


def test_a_shard_beyond_the_specs_shards_is_refused(stages, tmp_path):
    work, spec, _ = stages

    with pytest.raises(DataError, match="shard 3 does not exist: engine.shards is 3"):
        train_local.run(spec, 0, work / "partition", tmp_path / "x", shard=3)


# ---- the sharded graph on the local runner ----------------------------------------------
PIPELINE_SPEC = SPEC.replace("shards: 3", "shards: 2")  # 2 shard tasks per stage


def test_only_entries_whose_clients_train_alone_are_items_per_shard(tmp_path):
    spec = parse_spec(PIPELINE_SPEC.format(out=tmp_path))
    unsharded = parse_spec(PIPELINE_SPEC.format(out=tmp_path).replace("shards: 2", "shards: 1"))

    items = personalize_items(spec)

    assert [(i["label"], i["shard"]) for i in items] == [
        ("fedavg_ft", "0"), ("fedavg_ft", "1"), ("fedper", "")]
    assert [json.loads(i["spec_json"])["engine"]["shards"] for i in items] == [2, 2, 1]
    # the federated entry's task, and so its cache key, is the unsharded pipeline's
    assert items[2] == personalize_items(unsharded)[1]


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("sharded")
    (work / "spec.yaml").write_text(PIPELINE_SPEC.format(out=work / "results"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    run = subprocess.run([str(Path(sys.executable).with_name("pflpipe")), "run", "spec.yaml"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    spec = read_spec(work / "spec.yaml")
    alone = work / "alone"
    partition_data.run(spec, 0, alone / "partition")
    warm_start_fedavg.run(spec, 0, alone / "partition", alone / "checkpoints", alone / "fedavg")
    select_teachers.run(spec, alone / "checkpoints", alone / "teachers")
    train_local.run(spec, 0, alone / "partition", alone / "local")
    distill_grid_search.run(spec, 0, alone / "partition", alone / "checkpoints",
                            alone / "teachers", alone / "persfl")
    personalize.run(spec, 0, "fedavg_ft", alone / "partition", alone / "checkpoints",
                    alone / "fedavg_ft")
    return work, run.stdout


def test_every_shard_is_a_task_of_its_own(sharded_run):
    work, output = sharded_run

    titles = [f"{stage}[shard {k}]" for stage in ("train_local", "distill_grid_search")
              for k in (0, 1)] + [f"personalize[fedavg_ft, shard {k}]" for k in (0, 1)]
    for title in titles:
        assert f"{title} · seed 0" in output, output
    assert output.count("merge_shards") == 2, output
    # one log per task: fedavg_ft's two shards, and fedper (federated) once, whole
    assert sorted(p.name for p in (work / "results").rglob("personalize*.log")) == [
        "personalize_fedavg_ft_shard_0_seed_0.log", "personalize_fedavg_ft_shard_1_seed_0.log",
        "personalize_fedper_seed_0.log"]


@pytest.mark.parametrize("model, tables", [
    ("local", ("results.csv", "history.csv")),
    ("persfl", ("results.csv", "history.csv", "grid.csv", "chosen.csv")),
    ("fedavg_ft", ("results.csv", "history.csv"))])
def test_the_sharded_pipeline_equals_the_unsharded_stages(sharded_run, model, tables):
    work, _ = sharded_run
    piped = work / "results" / "latest" / "seed-0" / model

    for table in tables:
        same_table(csv_tables.read_csv(work / "alone" / model / table),
                   csv_tables.read_csv(piped / table))
    assert len(list((piped / "models").glob("client_*.pt"))) == 5
    assert not (piped / layout.SHARD_JSON).exists()


def test_unsharded_stages_compile_without_shard_loops(tmp_path):
    spec = parse_spec(PIPELINE_SPEC.format(out=tmp_path).replace("shards: 2", "shards: 1"))

    ir = next(yaml.safe_load_all(compile_pipeline(spec, tmp_path / "p.yaml").read_text()))

    assert "comp-merge-shards" not in ir["components"]

