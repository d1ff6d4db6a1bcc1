"""Which algorithms have a global model to score (GA, rows of scope ``global``).

An algorithm's global model is scored on every client only when it is one: every part of it is
trained by the federation (FedPer's and FedRep's head, LG-FedAvg's representation are never sent,
so they stay at their starting values), or it is the warm start's model (FedAvg-FT).
"""

import json

import pytest
import torch

from pflpipe.algorithms import REGISTRY, build
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.spec import parse_spec
from pflpipe.spec.algorithms import FedAvgFtParams, FedPerParams, LocalParams
from pflpipe.stages import (
    collect_results,
    evaluate_fairness,
    personalize,
    train_local,
    warm_start_fedavg,
)
from pflpipe.tracking import Tracker
from pflpipe.training import csv_tables


class MetricNames(Tracker):
    """A tracker that keeps the names of the metrics it is given (its child runs' too)."""

    def __init__(self):
        self.names = set()

    def log_metrics(self, metrics, step=None):
        self.names |= set(metrics)

    def log_history(self, rows, step_key="round"):
        self.names |= {name for row in rows for name in row if name != step_key}


def test_an_algorithm_has_a_global_model_exactly_when_every_part_of_it_is_trained(digits_ds3):
    # Prepare: every registered algorithm with its defaults, on the digits MLP (head: head.*)
    spec, s, _ = digits_ds3
    entries = "".join(f"  - {{name: {name}}}\n" for name in REGISTRY)
    entries = parse_spec(f"experiment: {{name: g}}\ndataset: {{name: digits}}\npartition: "
                         f"{{strategy: ds1, n_clients: 4}}\npersonalization:\n{entries}")
    moved, expected = {}, {}
    for entry in entries.personalization:
        algorithm = build(entry, head=s.head, federation=spec.federation)
        plan = Plan(rounds=1, local_epochs=2, batch_size=16, lr=algorithm.lr, seed=0,
                    score_global=False)

        # Execute: one round of two local epochs (pFedBayes' global mean moves from its second
        # step on: its first starts at the personal mean) from the seeded initial model
        result = Federation(algorithm, s.ctx, s.data, BatchedTrainer(s.ctx), plan).run(s.init)

        # the keys of the global model that the round changed
        moved[entry.name] = {k for k, v in s.init.items()
                             if not torch.equal(result.global_params[k].cpu(), v.cpu())}
        trained = moved[entry.name] == set(s.init)
        from_warm_start = entry.clients_train_alone and entry.warm_start != "none"
        expected[entry.name] = trained or from_warm_start

    # Assert: GA is scored exactly for those
    assert {n: REGISTRY[n].has_global_model for n in expected} == expected, moved
    assert {n for n, has in expected.items() if not has} == {"fedper", "fedrep", "lg_fedavg",
                                                            "local"}
    assert moved["fedper"] == moved["fedrep"] == {"base.1.weight", "base.1.bias"}
    assert moved["lg_fedavg"] == {"head.weight", "head.bias"}


@pytest.fixture(scope="module")
def stages(digits_ds3, tmp_path_factory):
    """The warm start, FedPer, FedAvg-FT and local run as the pipeline chains them, collected and
    reported; the metric names each personalize stage tracked."""
    spec, _, _ = digits_ds3
    work = tmp_path_factory.mktemp("global-model")
    spec = spec.model_copy(update={"personalization": [
        FedPerParams(name="fedper", rounds=2), FedAvgFtParams(name="fedavg_ft", epochs=1),
        LocalParams(name="local", epochs=1)]})
    partition = digits_ds3[2] / "partition"
    warm_start_fedavg.run(spec, 0, partition, work / "checkpoints", work / "fedavg")
    train_local.run(spec, 0, partition, work / "local")
    trackers = {label: MetricNames() for label in ("fedper", "fedavg_ft")}
    for label, tracker in trackers.items():
        personalize.run(spec, 0, label, partition, work / "checkpoints", work / label,
                        tracker=tracker)
    models = ("fedavg", "local", "fedper", "fedavg_ft")
    collect_results.run(spec, 0, [work / m for m in models], work / "collected")
    evaluate_fairness.run(spec, [work / "collected"], work / "report")
    return work, {label: tracker.names for label, tracker in trackers.items()}


def test_fedper_writes_and_tracks_no_ga_and_fedavg_ft_does(stages):
    stages, tracked = stages
    results = csv_tables.read_csv(stages / "collected" / "results.csv")
    for model, scopes in (("fedper", {""}), ("fedavg_ft", {"", "global"})):
        assert {r["scope"] for r in results if r["model"] == model} == scopes, model
        history = csv_tables.read_csv(stages / model / "history.csv")
        assert {r["scope"] for r in history} == scopes, model
    ga = {name for name in tracked["fedavg_ft"] if "global" in name}
    assert {"global.test_accuracy", "best.global.test_accuracy", "best_val.global.test_accuracy",
            "best_val.beats_global"} <= ga
    assert "best.test_accuracy" in tracked["fedper"]
    assert not {name for name in tracked["fedper"] if "global" in name}


def test_report_gives_fedper_pa_without_ga(stages):
    stages, _ = stages
    report = json.loads((stages / "report" / "report.json").read_text())
    comparison = report["splits"]["test"]["generalization"]
    assert comparison["fedper"]["GA"] is None and comparison["fedper"]["PA"] > 0.3
    assert comparison["fedper"]["beats_global"] is None
    ga = [float(r["accuracy"]) for r in csv_tables.read_csv(stages / "collected" / "results.csv")
          if r["model"] == "fedavg_ft" and r["scope"] == "global" and r["split"] == "test"
          and r["selection"] == "best_val"]
    assert len(ga) == 10 and comparison["fedavg_ft"]["GA"] == pytest.approx(sum(ga) / 10)
    assert comparison["fedavg_ft"]["beats_global"] is not None
    markdown = (stages / "report" / "report.md").read_text()
    rows = [line.split("|") for line in markdown.splitlines() if line.startswith("| fedper |")
            and line.count("|") == 5]   # the GA / PA / PA > GA tables (test, val)
    assert len(rows) == 2 and all(row[2].strip() == row[4].strip() == "—" for row in rows)
    assert "fedper" in (stages / "report" / "report.html").read_text()
    assert (stages / "report" / "figures" / "accuracy_rounds_test.png").is_file()
