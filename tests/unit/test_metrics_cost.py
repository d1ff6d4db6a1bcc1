"""Compute in all, the FedAvg warm start included: the warning's ratios, table, figure, rounds.

Every expected total is counted by hand from the hand-made history: a train row per client and
round holding the samples that client processed.
"""

from pathlib import Path

import pytest

from pflpipe.compute import in_all
from pflpipe.compute import totals as sums
from pflpipe.metrics import table_from_records
from pflpipe.report.report_writer import ReportContext, build_report
from pflpipe.spec import Spec, read_spec

REPO = Path(__file__).resolve().parents[2]


def trained(model, rounds, samples, clients=2, first=1):
    """Train rows: every client processes `samples` each round; a test row per round."""
    rows = []
    for r in range(first, first + rounds):
        rows += [{"seed": 0, "model": model, "round": r, "client": c, "split": "train",
                  "steps": 1, "samples": samples, "bytes_sent": 10, "bytes_received": 10}
                 for c in range(clients)]
        rows.append({"seed": 0, "model": model, "round": r, "client": 0, "split": "test",
                     "accuracy": 0.5, "scope": ""})
    return rows


def spec_of(personalization, rounds=3):
    return Spec.model_validate({"experiment": {"name": "t"}, "dataset": {"name": "digits"},
                                "partition": {"strategy": "ds1", "n_clients": 2},
                                "federation": {"rounds": rounds},
                                "personalization": personalization})


def report_of(history, plan, models, factor=1.5):
    table = table_from_records([{"client": c, "model": m, "accuracy": 0.5 + 0.1 * c,
                                 "split": "test"} for c in range(3)
                                for m in ("local", "fedavg", *models)])
    return build_report(table, context=ReportContext(history=tuple(history), plan=plan,
                                                     compute_mismatch=factor))


def test_fedper_against_its_copy_from_scratch_warns_of_twice_the_samples():
    # fedavg 3 rounds × 2 clients × 50 = 300; fedper 300 of its own + 300 of the warm start;
    # fedper-scratch 300. Own samples are equal (no warning today); in all, 600 / 300 = 2×.
    spec = spec_of([{"name": "fedper"},
                    {"name": "fedper", "label": "fedper-scratch", "warm_start": "none"}])
    plan = in_all.plan(spec, train_samples=100)
    history = trained("fedavg", 3, 50) + trained("fedper", 3, 50) + \
        trained("fedper-scratch", 3, 50)

    found = report_of(history, plan, ["fedper", "fedper-scratch"]).unequal_compute()

    assert found.text.startswith("Unequal compute: fedper processed 2× the samples of "
                                 "fedper-scratch (the FedAvg warm start included)")
    assert not found.by_design   # the settings differ: the warm start
    assert ("fedper: its settings schedule 2× fedper-scratch's passes over the clients' data (6 "
            "against 3 epochs, warm start included), and each pass costs it 1× as much") \
        in found.text
    assert "Match the settings (rounds, local_epochs, client_fraction, warm_start)" in found.text


def test_fedavg_ft_against_ditto_from_scratch_is_one_and_a_half_not_six():
    # fedavg 3 rounds × 2 × 50 = 300. fedavg_ft, 1 epoch: 2 × 50 = 100 own, 400 in all. Ditto
    # from scratch, 3 rounds of its global and its personal epoch: 3 × 2 × 100 = 600.
    # Own samples: 600 / 100 = 6×; in all: 600 / 400 = 1.5×, within the default 1.5×.
    spec = spec_of([{"name": "fedavg_ft", "epochs": 1}, {"name": "ditto", "warm_start": "none"}])
    plan = in_all.plan(spec, train_samples=100)
    history = trained("fedavg", 3, 50) + trained("fedavg_ft", 1, 50) + trained("ditto", 3, 100)

    assert in_all.in_all(history, plan)["fedavg_ft"]["samples"] == 400
    assert report_of(history, plan, ["fedavg_ft", "ditto"]).unequal_compute() is None
    found = report_of(history, plan, ["fedavg_ft", "ditto"], factor=1.2).unequal_compute()

    assert found.text.startswith("Compute by design: ditto processed 1.5× the samples of "
                                 "fedavg_ft (the FedAvg warm start included)")
    # its schedule (3 epochs) is below fedavg_ft's (1 + 3): the gap is Ditto's second model
    assert found.by_design
    assert ("ditto: its settings schedule 0.75× fedavg_ft's passes over the clients' data (3 "
            "against 4 epochs, warm start included), and each pass costs it 2× as much as "
            "fedavg_ft's (2 network passes per sample where FedAvg makes 1)") in found.text
    assert "match rounds" not in found.text and "Match them" not in found.text


def test_the_shipped_flow_digits_spec_counts_fedavgs_samples_for_fedavg_ft():
    # docs/results.md's run: fedavg 95,400 samples, fedavg_ft 5,300 of its own, flow 144,000
    # from scratch. 144,000 / 5,300 = 27.2×; counting the warm start 144,000 / 100,700 = 1.43×.
    spec = read_spec(REPO / "specs" / "flow-digits.yaml")
    plan = in_all.plan(spec, train_samples=1060)
    history = (trained("fedavg", 300, 318, clients=1) + trained("fedavg_ft", 5, 1060, clients=1)
               + trained("flow", 300, 480, clients=1))

    totals = in_all.in_all(history, plan)
    found = in_all.mismatch(totals, ["local", "fedavg"], 1.2, plan, sums.totals(history))

    assert (totals["fedavg_ft"]["samples"], totals["flow"]["samples"]) == (100_700, 144_000)
    assert found.text.startswith("Compute by design: flow processed 1.43× the samples of "
                                 "fedavg_ft")
    assert plan.passes("flow", 144_000) == pytest.approx(144_000 / (300 * 3 * 0.1 * 1060))


def test_the_compute_table_counts_in_all_and_shows_the_warm_starts_share():
    spec = spec_of([{"name": "fedper"}])
    plan = in_all.plan(spec, train_samples=100)
    history = trained("fedavg", 3, 50) + trained("fedper", 3, 50)

    markdown = report_of(history, plan, ["fedper"]).to_markdown()

    # fedper: 6 steps + 6, 300 + 300 samples, of which 300 warm start; 2× fedavg's 300
    assert "| fedper | 12 | 600 | 300 | 0.000 | 0.000 | 2 | 1 | 0 |" in markdown
    assert "| fedavg | 6 | 300 | 0 | 0.000 | 0.000 | 1 | 1 | 0 |" in markdown
    assert "| rounds |" not in markdown   # no run facts in this hand-made context


def test_a_warm_started_models_curve_starts_at_the_warm_starts_samples():
    spec = spec_of([{"name": "fedper"}, {"name": "ditto", "warm_start": 2}])
    plan = in_all.plan(spec)
    history = trained("fedavg", 3, 50) + trained("fedper", 2, 50) + trained("ditto", 1, 100)
    history.append({"seed": 0, "model": "fedper", "round": 0, "client": 0, "split": "test",
                    "accuracy": 0.4, "scope": ""})

    curves = sums.accuracy_vs_samples(history, "test", in_all.starting_samples(history, plan))

    assert curves["fedper"][0] == [300.0, 400.0, 500.0]   # round 0 = the warm start's 300
    assert curves["ditto"][0] == [200.0 + 200.0]          # rounds 1-2 of fedavg, then its own
    assert curves["fedavg"][0] == [100.0, 200.0, 300.0]


def test_the_rounds_row_names_each_models_warm_start_rounds():
    spec = spec_of([{"name": "persfl"}, {"name": "fedper"}, {"name": "fedavg_ft", "epochs": 5},
                    {"name": "ditto", "warm_start": 2}, {"name": "apfl", "warm_start": "none"}])

    described = in_all.plan(spec).described

    assert list(described.values()) == [
        "fedavg 3 rounds", "local 20 epochs", "persfl 10 distillation epochs + 3 warm-start "
        "rounds", "fedper 3 + 3 warm-start rounds", "fedavg_ft 5 epochs + 3 warm-start rounds",
        "ditto 3 + 2 warm-start rounds", "apfl 3 rounds"]


def test_the_rounds_figure_says_after_how_many_warm_start_rounds_a_model_started():
    from pflpipe.report.score_curves import accuracy_rounds_figure

    history = trained("fedavg", 3, 50) + trained("fedper", 2, 50) + trained("ditto", 2, 50)

    figure = accuracy_rounds_figure(history, "test", ["fedavg", "fedper", "ditto"],
                                    starts={"fedper": 3})

    labels = [ax.get_xlabel() for ax in figure.axes[:3]]
    assert labels == ["round", "round, after 3 warm-start rounds", "round"]


def test_persfl_is_counted_under_its_objectives_name():
    spec = spec_of([{"name": "persfl"}])
    spec = spec.model_copy(update={"distillation": spec.distillation.model_copy(
        update={"objective": "ce"})})

    plan = in_all.plan(spec)

    assert plan.starts == {"persfl_gd": 3}
    assert plan.described["persfl_gd"] == "persfl_gd 10 distillation epochs + 3 warm-start rounds"
