"""Compute per model in results.csv, MLflow and the report; the unequal-compute warning.

pFedVEM trains every client each round (its default client_fraction 1), pFedMe a 10 % share and
FedPer the federation's default (every client): the report must name pFedVEM against pFedMe.
"""

import json

import pytest
from mlflow import MlflowClient

from pflpipe.spec.algorithms import FedPerParams, PerFedAvgParams, PFedMeParams, PFedVemParams
from pflpipe.stages import (
    collect_results,
    evaluate_fairness,
    personalize,
    train_local,
    warm_start_fedavg,
)
from pflpipe.tracking import open_parent_run
from pflpipe.training import csv_tables

MODELS = ("fedavg", "local", "pfedvem", "pfedme", "fedper", "per_fedavg")


@pytest.fixture(scope="module")
def run(digits_ds3, tmp_path_factory):
    spec, _, root = digits_ds3
    work = tmp_path_factory.mktemp("compute")
    spec = spec.model_copy(update={
        "personalization": [PFedVemParams(name="pfedvem", rounds=2),
                            PFedMeParams(name="pfedme", rounds=2, client_fraction=0.1),
                            FedPerParams(name="fedper", rounds=2),
                            PerFedAvgParams(name="per_fedavg", rounds=2)],
        "tracking": spec.tracking.model_copy(update={
            "enabled": True, "uri": f"sqlite:///{work}/mlflow.db"})})
    partition = root / "partition"
    warm_start_fedavg.run(spec, 0, partition, work / "checkpoints", work / "fedavg")
    train_local.run(spec, 0, partition, work / "local")
    for label in ("pfedvem", "pfedme", "fedper", "per_fedavg"):
        personalize.run(spec, 0, label, partition, work / "checkpoints", work / label)
    parent = open_parent_run(spec)
    collect_results.run(spec, 0, [work / m for m in MODELS], work / "collected",
                        partition_dir=partition, checkpoints_dir=work / "checkpoints",
                        tracker=parent.tracker())
    evaluate_fairness.run(spec, [work / "collected"], work / "report")
    parent.finish()
    return spec, work, parent


def test_results_csv_holds_each_clients_compute_summed_over_its_rounds(run, digits_ds3):
    _, work, _ = run
    _, s, _ = digits_ds3
    counts = s.data.train.counts.tolist()
    results = csv_tables.read_csv(work / "collected" / "results.csv")
    for model in MODELS:
        history = [r for r in csv_tables.read_csv(work / model / "history.csv")
                   if r["split"] == "train"]
        for row in (r for r in results if r["model"] == model):
            mine = [h for h in history if h["client"] == row["client"]]
            assert int(row["samples"]) == sum(int(h["samples"]) for h in mine), model
            assert int(row["steps"]) == sum(int(h["steps"]) for h in mine), model
    # FedPer, every client, 2 rounds of one local epoch, one update per step: 2·n_k samples
    fedper = {int(r["client"]): int(r["samples"]) for r in results if r["model"] == "fedper"}
    assert fedper == {c: 2 * n for c, n in enumerate(counts)}
    # pFedMe: 10 % of 10 clients = one client per round; two rounds touch at most two clients
    pfedme = [int(r["samples"]) for r in results if r["model"] == "pfedme"
              and r["selection"] == "best_val" and r["split"] == "test" and not r["scope"]]
    assert sum(1 for v in pfedme if v) <= 2
    # what each trained client-round processed, from the passes the engine measured: pFedMe's
    # K inner steps over each sample of its epoch, pFedVEM's K draws in each of its head_steps
    # full-batch E-steps and in its base epoch (mini-batches of 16 cover every sample once)
    me, vem = PFedMeParams(name="pfedme"), PFedVemParams(name="pfedvem")
    per_round = {"pfedme": me.inner_steps, "pfedvem": vem.mc_samples * (vem.head_steps + 1),
                 "fedper": 1}
    for model, passes in per_round.items():
        trained = [h for h in csv_tables.read_csv(work / model / "history.csv")
                   if h["split"] == "train"]
        assert trained and all(int(h["samples"]) == passes * counts[int(h["client"])]
                               for h in trained), model
    # the local baseline sends nothing; FedPer sends its base only, less than FedAvg's model
    sent = {m: max(int(r["bytes_sent"]) for r in results if r["model"] == m) for m in MODELS}
    assert sent["local"] == 0 and 0 < sent["fedper"] < sent["fedavg"]


def test_mlflow_runs_carry_compute_per_algorithm_and_per_client(run):
    _, work, parent = run
    client = MlflowClient(f"sqlite:///{work}/mlflow.db")
    runs = client.search_runs([parent.experiment_id])
    algorithm = {r.data.tags.get("algorithm"): r for r in runs if r.data.tags.get("algorithm")}
    assert set(MODELS) <= set(algorithm)
    results = csv_tables.read_csv(work / "collected" / "results.csv")
    total = sum(int(r["samples"]) for r in results if r["model"] == "pfedvem"
                and r["selection"] == "best_val" and r["split"] == "test" and not r["scope"])
    assert algorithm["pfedvem"].data.metrics["compute.all_clients.samples"] == total
    assert algorithm["pfedvem"].data.metrics["compute.total.samples"] == total / 10
    # each client's values are rows of its algorithm's run's tables
    from client_tables import client_history, client_table

    pfedvem = algorithm["pfedvem"].info.run_id
    final = client_table(client, pfedvem)
    assert [row["client"] for row in final] == list(range(10))
    assert all(row["compute.total.samples"] > 0 for row in final)
    assert [r for r, _ in client_history(client, pfedvem, 0, "compute.samples")] == [1, 2]
    assert client_history(client, pfedvem, 0, "diag.tau")
    adapted = sum(int(r["adaptation_samples"]) for r in results if r["model"] == "per_fedavg"
                  and r["selection"] == "best_val" and r["split"] == "test" and not r["scope"])
    assert algorithm["per_fedavg"].data.metrics["compute.all_clients.adaptation_samples"] == adapted
    steps = client_history(client, algorithm["per_fedavg"].info.run_id, 0,
                           "compute.adaptation_steps")
    assert steps == [(0, 1.0), (1, 1.0), (2, 1.0)]


def test_report_shows_compute_per_model_and_warns_of_pfedvem_against_pfedme(run):
    _, work, _ = run
    report = json.loads((work / "report" / "report.json").read_text())
    assert set(MODELS) <= set(report["compute"])
    # every personalize entry starts from the warm start's final model: in all, its own
    # samples plus all of FedAvg's
    own, in_all = report["compute"], report["compute_in_all"]
    for model in ("pfedvem", "pfedme", "fedper", "per_fedavg"):
        assert in_all[model]["samples"] == own[model]["samples"] + own["fedavg"]["samples"]
    assert in_all["fedavg"] == own["fedavg"] and in_all["local"] == own["local"]
    warning = report["compute_warning"]
    assert warning.startswith("Unequal compute: ") and "the samples of pfedme" in warning
    least = in_all["pfedme"]["samples"]
    for model in ("pfedvem", "fedper", "per_fedavg"):
        ratio = in_all[model]["samples"] / least
        assert (f"{model} processed {ratio:.3g}×" in warning) == (ratio > 1.5), model
    assert "pfedvem processed" in warning
    markdown = (work / "report" / "report.md").read_text()
    assert "## Compute" in markdown and "**Warning.** Unequal compute" in markdown
    # Per-FedAvg adapts every client before each of its 3 evaluations (one step of 16 samples
    # at most): its adaptation column; the others adapt nothing
    results = csv_tables.read_csv(work / "collected" / "results.csv")
    adapted = sum(int(r["adaptation_samples"]) for r in results if r["model"] == "per_fedavg"
                  and r["selection"] == "best_val" and r["split"] == "test" and not r["scope"])
    assert report["compute"]["per_fedavg"]["adaptation_samples"] == adapted > 0
    assert report["compute"]["pfedvem"]["adaptation_samples"] == 0
    assert "adaptation samples |" in markdown and f"| {adapted:,} |" in markdown
    assert "## Mechanism diagnostics" in markdown
    assert (work / "report" / "figures" / "accuracy_vs_samples.png").is_file()
    assert (work / "report" / "figures" / "diagnostics_pfedvem.png").is_file()
    assert (work / "report" / "figures" / "diagnostics_pfedme.png").is_file()
