"""A real sweep on kfp.local: the thesis table (DS-1, DS-3) in small, against separate runs.

One module-scoped sweep (2 points × 2 seeds, 3 clients, 1 round) and one separate run of each
point's spec, each in its own results directory (no shared cache or checkpoints): per point, the
sweep's per-client results equal the separate run's cell for cell. The same sweep's MLflow parent
holds a child run per point (its overrides as params, the `sweep.point` tag, each seed's split as
a dataset input) with the per-algorithm runs below it; its report links each point's own; a rerun
trains nothing; `pflpipe report` rebuilds the sweep report from the published run.
"""

import json
import sys

import pandas as pd
import pytest
from mlflow import MlflowClient

import pflpipe
from pflpipe import layout
from pflpipe.cli import main
from pflpipe.spec.sweep import points

SPEC = """\
experiment: {{name: table-small, seeds: [0, 1], output_dir: {out}/sweep}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 3}}
federation: {{rounds: 1, lr: 0.3}}
personalization: [{{name: fedper, rounds: 1}}, {{name: local, epochs: 1}}]
tracking: {{uri: "sqlite:///{out}/mlflow.db"}}
sweep:
  partition:
    - {{strategy: ds1, n_clients: 3, classes_per_client: 4}}
    - {{strategy: ds3, n_clients: 3, mu: 0.0, sigma: 2.0}}
"""
LABELS = ["partition=ds1(n_clients=3,classes_per_client=4)",
          "partition=ds3(n_clients=3,mu=0.0,sigma=2.0)"]
TRAINING = ("partition_data", "warm_start_fedavg", "train_local", "personalize")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    out = tmp_path_factory.mktemp("table")
    (out / "table.yaml").write_text(SPEC.format(out=out))
    sweep = pflpipe.run(out / "table.yaml", quiet=True)
    alone = {point.label: pflpipe.run(pflpipe.load_spec(point.spec, tracking={"enabled": False}),
                                      results=out / f"alone-{i}", quiet=True)
             for i, point in enumerate(points(sweep.spec))}   # untracked: the same results
    return out, sweep, alone


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns[:4])).reset_index(drop=True)


def test_each_point_gives_exactly_the_per_client_results_of_its_separate_run(table):
    _, sweep, alone = table

    assert list(sweep.points) == LABELS
    for label, point in sweep.points.items():
        ours, theirs = _sorted(point.results), _sorted(alone[label].results)
        assert sorted(ours["seed"].unique()) == [0, 1]
        assert set(ours["model"]) == {"fedavg", "local", "fedper"}
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    first, second = (_sorted(p.results) for p in sweep.points.values())
    assert not first["accuracy"].equals(second["accuracy"])   # the points did differ


def test_the_sweep_trains_each_seeds_partition_once_per_point(table):
    _, sweep, _ = table
    titles = [title for title, _ in sweep.stages]

    assert sum(t.startswith("partition_data") for t in titles) == 2 * 2   # points × seeds
    assert sorted(t for t in titles if t.startswith("evaluate_fairness")) == [
        f"evaluate_fairness[{label}]" for label in sorted(LABELS)]


def test_mlflow_holds_a_child_run_per_point_with_its_overrides_and_splits(table):
    out, sweep, _ = table
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    runs = client.search_runs([client.get_run(sweep.mlflow_run_id).info.experiment_id])
    children = {r.info.run_id: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == sweep.mlflow_run_id}
    by_point = {r.data.tags.get("sweep.point"): r for r in children.values()}

    assert set(by_point) == set(LABELS)
    assert client.get_run(sweep.mlflow_run_id).info.run_name == (
        "table-small · sweep of partition (2 points) · fedavg+fedper · seeds 0-1")
    ds1 = by_point[LABELS[0]]
    assert json.loads(ds1.data.params["sweep.partition"]) == {
        "strategy": "ds1", "n_clients": 3, "classes_per_client": 4}
    manifests = [json.loads((d / layout.PARTITION / layout.MANIFEST_JSON).read_text())
                 for _, d in sorted(sweep.points[LABELS[0]].seed_dirs.items())]
    assert [(i.dataset.name, i.dataset.digest) for i in ds1.inputs.dataset_inputs] == [
        (f"digits-ds1(classes_per_client=4,n_clients=3)-seed{m['seed']}", m["content_hash"][:16])
        for m in manifests]
    below = {r.info.run_name for r in runs
             if r.data.tags.get("mlflow.parentRunId") == ds1.info.run_id}
    assert {"fedavg · seed 0", "fedper · seed 1"} <= below
    logged = {a.path for a in client.list_artifacts(sweep.mlflow_run_id, layout.REPORT_FOLDER)}
    assert f"{layout.REPORT_FOLDER}/{layout.SWEEP_JSON}" in logged   # the sweep report


def test_the_sweep_report_links_every_points_own_report(table):
    _, sweep, _ = table
    facts = json.loads((sweep.report_dir / layout.SWEEP_JSON).read_text())

    assert [p["label"] for p in facts["points"]] == LABELS
    for point in facts["points"]:
        own = sweep.report_dir / point["report"] / layout.REPORT_HTML
        assert own.is_file()
        assert f"{point['report']}/{layout.REPORT_HTML}" in (
            sweep.report_dir / layout.REPORT_MD).read_text()
        report = json.loads((own.parent / layout.REPORT_JSON).read_text())
        assert point["models"]["fedper"]["mean"] == report["models"]["fedper"]["performance"]["AA"]
    assert not (sweep.report_dir / layout.FIGURES).exists()   # a categorical sweep: no figure


def test_a_rerun_of_the_sweep_trains_nothing(table):
    out, _, _ = table

    again = pflpipe.run(out / "table.yaml", quiet=True)

    trained = [title for title, status in again.stages
               if title.startswith(TRAINING) and status != "CACHED"]
    assert trained == []


def test_report_rebuilds_the_sweep_report_from_a_published_run(table, tmp_path, capsys):
    _, sweep, _ = table

    code = main(["report", str(sweep.run_dir), "-o", str(tmp_path / "again")])

    assert code == 0
    def facts(folder):
        return [(p["label"], p["models"], p["separated"])
                for p in json.loads((folder / layout.SWEEP_JSON).read_text())["points"]]

    assert facts(tmp_path / "again") == facts(sweep.report_dir)
    assert (tmp_path / "again" / layout.REPORT_HTML).is_file()
    printed = capsys.readouterr().out
    assert all(label in printed for label in LABELS)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
