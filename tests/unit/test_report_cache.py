"""A rerun of evaluate_fairness on unchanged inputs: the same report, a complete parent run.

Real parts only: the stage as the pipeline's last task calls it (`run_in_pipeline`) on a
collected seed folder, into parent runs of a real MLflow sqlite store.
"""

import csv
import json
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pflpipe.report.report_cache import SEEDS_RUN_TAG, key
from pflpipe.spec import Spec
from pflpipe.stages import evaluate_fairness
from pflpipe.tracking import open_parent_run

GOLDEN = Path(__file__).parent / "golden" / "quickstart-results.csv"
MANIFEST = GOLDEN.with_name("quickstart-manifest.json")   # the quickstart's partition
MODELS = ("fedavg", "local", "fedper")


def spec(tmp_path) -> Spec:
    return Spec.model_validate({
        "experiment": {"name": "cache", "seeds": [0], "output_dir": str(tmp_path / "results")},
        "dataset": {"name": "digits"}, "partition": {"strategy": "ds2", "n_clients": 10},
        "personalization": [{"name": "fedper"}],
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}})


@pytest.fixture
def seed_dir(tmp_path):
    """A collected seed as `collect_results` writes it, from the quickstart's (no models)."""
    with open(GOLDEN, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["model"] in MODELS]
    directory = tmp_path / "seed-0"
    for model in MODELS:
        (directory / model).mkdir(parents=True)
        mine = [r for r in rows if r["model"] == model]
        for name, table in (("results.csv", mine), ("history.csv", [
                {"seed": 0, "client": r["client"], "model": model, "round": r["round"],
                 "split": r["split"], "loss": r["loss"], "accuracy": r["accuracy"]}
                for r in mine])):
            with (directory / model / name).open("w", newline="") as handle:
                writer = csv.DictWriter(handle, list(table[0]))
                writer.writeheader()
                writer.writerows(table)
    with (directory / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (directory / "collected.json").write_text(json.dumps({"seed": 0, "models": list(MODELS)}))
    (directory / "partition").mkdir()
    shutil.copyfile(MANIFEST, directory / "partition" / "manifest.json")
    return directory


def run_once(tmp_path, seed_dir, name: str):
    """One pipeline run's last task into a new parent run; its run id and report folder."""
    the_spec = spec(tmp_path)
    parent = open_parent_run(the_spec)
    out = tmp_path / name
    evaluate_fairness.run_in_pipeline(the_spec, [seed_dir], out, tracking_uri="",
                                      experiment=parent.experiment, parent_run_id=parent.run_id)
    parent.finish()
    return parent.run_id, out


def children(client, run_id: str) -> list:
    experiment = client.get_run(run_id).info.experiment_id
    return [r for r in client.search_runs([experiment], max_results=1000)
            if r.data.tags.get("root_run_id") == run_id]


def test_a_rerun_gives_the_same_report_and_points_at_the_run_that_logged_the_seeds(
        tmp_path, seed_dir):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first, first_out = run_once(tmp_path, seed_dir, "first")
    # collect_results gathers the same files into a new folder on every pipeline run
    again = shutil.copytree(seed_dir, tmp_path / "seed-0-again")
    second, second_out = run_once(tmp_path, again, "second")

    # the same report: every number, verdict and figure (the run info names its own runs)
    old, new = (json.loads((out / "report.json").read_text()) for out in (first_out, second_out))
    assert {k: v for k, v in new.items() if k != "run"} == \
        {k: v for k, v in old.items() if k != "run"}
    figures = sorted(p.relative_to(first_out) for p in (first_out / "figures").iterdir())
    assert figures and figures == sorted(p.relative_to(second_out)
                                         for p in (second_out / "figures").iterdir())
    assert all((first_out / f).read_bytes() == (second_out / f).read_bytes() for f in figures)

    # a complete parent run: the report's metrics, tags and artifacts; the seeds by reference
    runs = {r: client.get_run(r) for r in (first, second)}
    assert runs[second].data.metrics == runs[first].data.metrics
    assert runs[second].data.tags[SEEDS_RUN_TAG] == first
    assert SEEDS_RUN_TAG not in runs[first].data.tags
    assert {t: runs[second].data.tags[t] for t in ("best.test", "fairest.test")} == \
        {t: runs[first].data.tags[t] for t in ("best.test", "fairest.test")}
    artifacts = {a.path for a in client.list_artifacts(second)}
    assert {"report", "seed-0"} <= artifacts
    assert len(children(client, first)) == 3   # a run per model (its clients in its tables)
    assert children(client, second) == []


def test_changed_inputs_or_a_deleted_run_log_the_seeds_again(tmp_path, seed_dir):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first, _ = run_once(tmp_path, seed_dir, "first")
    before = key(spec(tmp_path), [seed_dir])
    table = seed_dir / "fedper" / "results.csv"
    table.write_text(table.read_text().replace("0.9344262480735779", "0.9344262480735778", 1))
    assert key(spec(tmp_path), [seed_dir]) != before

    changed, _ = run_once(tmp_path, seed_dir, "changed")
    assert SEEDS_RUN_TAG not in client.get_run(changed).data.tags
    assert len(children(client, changed)) == 3

    client.delete_run(changed)   # the run that holds the seeds is gone: log them again
    again, _ = run_once(tmp_path, seed_dir, "again")
    assert SEEDS_RUN_TAG not in client.get_run(again).data.tags
    assert len(children(client, again)) == 3


def test_kept_figures_are_the_drawn_ones_and_a_damaged_record_is_drawn_again(tmp_path, seed_dir):
    from pflpipe.report.report_cache import FIGURES_JSON, open_cache

    the_spec = spec(tmp_path)
    cache = open_cache(the_spec, [seed_dir])
    assert cache.figures() is None   # nothing kept yet: drawn, then kept
    evaluate_fairness.run(the_spec, [seed_dir], tmp_path / "first", cache=cache)
    images, _ = cache.figures()
    assert images and all((tmp_path / "first" / name).read_bytes() == data
                          for name, data in images.items())

    cache.store.put_bytes(FIGURES_JSON, b"{not json")
    assert cache.figures() is None
    evaluate_fairness.run(the_spec, [seed_dir], tmp_path / "again", cache=cache)
    assert json.loads((tmp_path / "again" / "report.json").read_text()) == \
        json.loads((tmp_path / "first" / "report.json").read_text())
    assert cache.figures()[0] == images   # kept anew
