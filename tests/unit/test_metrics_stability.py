"""Best-on-validation hides instability: the report flags a last round far below, and swings."""

import pytest

from pflpipe.metrics import table_from_records
from pflpipe.report.report_writer import ReportContext, build_report
from pflpipe.report.stability_section import FAR, SWING, assess, late_falls

# pFedMe as issue 43 saw it: 0.897 → 0.487 after one round, 0.81-0.86 at the end; its clients'
# best rounds average 0.936, its last round 0.874.
PFEDME = [0.897, 0.487, 0.70, 0.80, 0.84, 0.86, 0.81, 0.855, 0.82, 0.874]
STEADY = [0.60, 0.80, 0.88, 0.90, 0.91, 0.92, 0.925, 0.93, 0.93, 0.935]


def history(model, curve, clients=2):
    return [{"seed": 0, "model": model, "round": r, "client": c, "split": "test",
             "accuracy": a, "scope": ""} for r, a in enumerate(curve) for c in range(clients)]


def records(model, selected, last, clients=2):
    return [{"client": c, "model": model, "split": "test", "selection": selection,
             "accuracy": value} for c in range(clients)
            for selection, value in (("best_val", selected), ("last_round", last))]


@pytest.fixture
def report():
    table = table_from_records(records("local", 0.8, 0.8) + records("fedavg", 0.9, 0.9)
                               + records("pfedme", 0.936, 0.874)
                               + records("fedper", 0.94, 0.935))
    rows = history("pfedme", PFEDME) + history("fedper", STEADY)
    return build_report(table, context=ReportContext(history=tuple(rows)))


def test_a_last_round_far_below_the_selected_one_and_a_late_swing_are_flagged(report):
    pfedme, fedper = report.stability["pfedme"], report.stability["fedper"]

    assert pfedme.selected == pytest.approx(0.936) and pfedme.last == pytest.approx(0.874)
    assert pfedme.far_below and not fedper.far_below       # 6.2 points against 0.5
    # rounds 5-9 are the second half: 0.86 at round 5 falls to 0.81 at round 6
    assert pfedme.swings and (pfedme.fall_from, pfedme.fall_to) == (5, 6)
    assert pfedme.fall == pytest.approx(0.05)
    assert not fedper.swings and fedper.fall == 0


def test_the_report_says_so_per_model(report):
    markdown = report.to_markdown()

    assert "## Stability of the selected models" in markdown
    assert ("- pfedme: its last round scores 87.4, 6.2 points below the 93.6 of the models "
            "selected on validation; its mean test accuracy falls by 5 points from round 5 to "
            "round 6, late in its run.") in markdown
    assert "| pfedme | 93.6 | 87.4 | -6.2 | 5 (round 5 → 6) | far below, swings |" in markdown
    assert "| fedper | 94 | 93.5 | -0.5 | 0 | — |" in markdown
    assert "fedper:" not in markdown.split("## Stability")[1].split("##")[0].replace(
        "| fedper |", "")
    assert report.to_json()["stability"]["pfedme"]["far_below"] is True


def test_the_margins_are_three_and_four_points_exactly():
    table = table_from_records(records("local", 0.8, 0.8) + records("fedavg", 0.9, 0.9)
                               + records("a", 0.90, 0.90 - FAR) + records("b", 0.90, 0.869))
    rows = history("a", [0.5, 0.9, 0.9, 0.9 - SWING]) + history("b", [0.5, 0.9, 0.9, 0.859])
    found = assess(table, rows, "test", "best_val")

    assert not found["a"].far_below and found["b"].far_below
    assert not found["a"].swings and found["b"].swings


def test_rounds_that_scored_only_some_clients_are_not_read_as_swings():
    # a sampled evaluation: round 4 scored one client (a weak one); the full rounds are steady
    rows = history("flow", [0.5, 0.8, 0.9, 0.9, 0.9, 0.9])
    rows = [r for r in rows if not (r["round"] == 4 and r["client"] == 1)]
    rows[[i for i, r in enumerate(rows) if r["round"] == 4][0]]["accuracy"] = 0.3

    assert late_falls(rows, "test")["flow"][0] == 0
