"""A real run of two entries that differ by a negligible setting: no winner between them.

The spec runs FedPer twice on digits (10 clients, one seed), the second entry labelled
``fedper-lr`` with a learning rate 1 % higher. Whatever the means say, the report, the closing
line that `pflpipe run` prints (`execute`'s, which `pflpipe.run` prints too) and
`pflpipe.run(...).best` must not name one of them the winner; the MLflow parent run carries the
pairwise verdict, its metrics and pairwise.csv.

The twins fine-tune gently (lr 0.05) from a trained FedAvg start, where 1 % of lr is negligible
(measured: Δ 1.0 pp, p = 1). From a 4-round start at lr 0.3 with 2 rounds, each twin's own
mini-batch stream (an entry's stream is its position in the spec) moved clients by up to 30
points and the test over one seed's clients resolved them (Δ 8.3 pp, p = 0.039): training noise,
which a verdict over the clients of one seed does not see (the report says so).
"""

import csv
import io
import json
import sys

import pytest
from mlflow import MlflowClient

import pflpipe

SPEC = """\
experiment: {{name: lr-twins, seeds: [0], output_dir: {out}/results}}
dataset: {{name: digits}}
partition: {{strategy: ds2, n_clients: 10, alpha: 0.5}}
federation: {{rounds: 10, lr: 0.3}}
personalization:
  - {{name: fedper, rounds: 4, lr: 0.05}}
  - {{name: fedper, label: fedper-lr, rounds: 4, lr: 0.0505}}
tracking: {{uri: "sqlite:///{out}/mlflow.db"}}
"""
TWINS = {"fedper", "fedper-lr"}


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    out = tmp_path_factory.mktemp("twins")
    (out / "twins.yaml").write_text(SPEC.format(out=out))
    capture = pytest.MonkeyPatch()
    printed = io.StringIO()
    capture.setattr(sys, "stdout", printed)
    try:
        result = pflpipe.run(out / "twins.yaml")
    finally:
        capture.undo()
    return result, printed.getvalue()


def test_run_best_names_both_twins(twins):
    result, _ = twins
    assert set(result.best) == TWINS and len(result.best) == 2
    assert result.report["best"] is None


def test_closing_line_says_the_twins_are_indistinguishable(twins):
    _, printed = twins
    closing = printed.rstrip().splitlines()[-1]
    assert closing.startswith("Best performing on test: fedper")
    assert " are indistinguishable here (Δ " in closing.split("Fairest on test:")[0]
    assert "n = 10 clients" in closing and "would settle it" in closing


def test_report_pairwise_verdict_is_unresolved(twins):
    result, _ = twins
    verdict = result.report["verdicts"]["best"]
    (pair,) = verdict["pairs"]
    assert {pair["a"], pair["b"]} == TWINS and not pair["resolved"] and pair["p_holm"] >= 0.05
    assert abs(pair["delta"]) < 0.05  # a few points at most between the twins
    markdown = (result.report_dir / "report.md").read_text()
    assert "indistinguishable here" in markdown and "| best (accuracy) |" in markdown


def test_mlflow_parent_run_carries_the_intervals_and_the_verdict(twins):
    result, _ = twins
    client = MlflowClient(result.tracking_uri)
    run = client.get_run(result.mlflow_run_id)
    (pair,) = result.report["verdicts"]["best"]["pairs"]
    stem = f"pairwise.test.{pair['a']}_vs_{pair['b']}.AA"
    assert run.data.metrics[f"{stem}.resolved"] == 0.0
    assert run.data.metrics[f"{stem}.p_holm"] >= 0.05 and f"{stem}.units_needed" in run.data.metrics
    for model in TWINS:
        low, high = (run.data.metrics[f"{model}.test.AA.{end}"] for end in ("ci_low", "ci_high"))
        assert low <= run.data.metrics[f"{model}.test.AA"] <= high
    assert set(run.data.tags["best.test"].split(", ")) == TWINS
    assert run.data.tags["best.test.resolved"] == "false"
    local = client.download_artifacts(result.mlflow_run_id, "report/pairwise.csv",
                                      str(result.run_dir.parent / "download"))
    with open(local, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["question"], r["resolved"]) for r in rows if r["split"] == "test"} >= {
        ("best", "False")}
    assert json.loads((result.report_dir / "report.json").read_text())["verdicts"]["best"][
        "resolved"] is False
