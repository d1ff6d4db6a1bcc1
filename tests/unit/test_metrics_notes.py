"""The report's per-model notes (`pflpipe.report.report_notes`) on hand-made history rows."""

import torch

from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.metrics import table_from_records
from pflpipe.report import report_notes as notes
from pflpipe.report.report_writer import ReportContext, build_report
from pflpipe.stages import warm_start_fedavg


def _val(model, seed, client, round_idx, accuracy, loss=1.0):
    return {"model": model, "seed": seed, "client": client, "round": round_idx, "split": "val",
            "scope": "", "accuracy": accuracy, "loss": loss}


# pfedbayes, seed 0: client 0 starts at 0.9 and trains to 0.5 / 0.8 (worse); client 1 starts at
# 0.5 and ties at round 1 with a lower loss (not worse); client 2 improves. Seed 1: client 0
# worse again. Its global scope's rows and the test rows are not read.
HISTORY = [
    _val("pfedbayes", 0, 0, 0, 0.9), _val("pfedbayes", 0, 0, 1, 0.5),
    _val("pfedbayes", 0, 0, 2, 0.8),
    _val("pfedbayes", 0, 1, 0, 0.5), _val("pfedbayes", 0, 1, 1, 0.5, loss=0.5),
    _val("pfedbayes", 0, 2, 0, 0.5), _val("pfedbayes", 0, 2, 1, 0.7),
    _val("pfedbayes", 1, 0, 0, 0.9), _val("pfedbayes", 1, 0, 1, 0.2),
    {**_val("pfedbayes", 0, 2, 0, 1.0), "scope": "global"},
    {**_val("pfedbayes", 0, 2, 0, 1.0), "split": "test"},
    _val("ditto", 0, 0, 0, 0.5), _val("ditto", 0, 0, 1, 0.9),
]


def test_started_better_counts_clients_whose_round_0_beats_every_trained_round():
    assert notes.started_better(HISTORY) == {("ditto", 0): (0, 1), ("pfedbayes", 0): (1, 3),
                                             ("pfedbayes", 1): (1, 1)}


def test_report_notes_say_how_many_clients_validated_better_at_the_start():
    table = table_from_records([{"client": c, "model": m, "accuracy": 0.5, "split": "test"}
                                for c in range(3) for m in ("pfedbayes", "ditto", "local",
                                                            "fedavg")])

    report = build_report(table, context=ReportContext(history=tuple(HISTORY)))

    line = ("pfedbayes: 2 of 4 clients validated better at round 0 (the model it started "
            "from, before it trained) than at any round it trained")
    assert [n[:len(line)] for n in report.model_notes()] == [line]   # ditto improved: no note
    assert report.to_json()["notes"] == report.model_notes()
    markdown = report.to_markdown()
    assert "## Notes" in markdown and line in markdown
    assert "Round 0, the model a run started from" in report.to_json()["protocol"]
    # last-round selection never scores round 0: nothing to note
    assert build_report(table, selection="last_round",
                        context=ReportContext(history=tuple(HISTORY))).model_notes() == []


def test_routing_note_names_the_layers_outside_5_to_95_percent_per_seed():
    # flow, last round 300: seed 0 hidden 1.0, head 0.0 (degenerate); seed 1 0.5 / 0.4 (not)
    rows = [{"model": "flow", "seed": seed, "client": c, "round": r, "split": "train",
             "diag.to_global.0": hidden, "diag.to_global.1": head}
            for seed, hidden, head in ((0, 1.0, 0.0), (1, 0.5, 0.4)) for c in (0, 1)
            for r in (299, 300)]
    rows[0]["diag.to_global.0"] = 0.5          # round 299 is not the last: not read

    (line,) = notes.model_lines(rows)

    assert line.startswith("flow: routing is degenerate on 1 of 2 seed(s)")
    assert "seed 0, round 300: layer 0 100.0 %, layer 1 0.0 %" in line
    assert "seed 1" not in line


def test_the_warm_starts_best_round_is_a_trained_one():
    # Two clients of 2 val samples; round 0 (the initial model) scores best on validation
    # (mean 0.9), round 2 next (0.75), round 1 worst: FedAvg's best-val round is 2.
    split = SplitData(torch.zeros(4, 1), torch.zeros(4, dtype=torch.long),
                      torch.tensor([0, 2, 4]))
    data = FederatedData(split, split, split)
    rows = [{"round": r, "client": c, "split": s, "accuracy": acc, "loss": 1.0}
            for r, acc in ((0, 0.9), (1, 0.5), (2, 0.75)) for c in (0, 1)
            for s in ("val", "test")]

    results, best = warm_start_fedavg._global_results(rows, 2, 0, data)

    assert best == 2
    assert {r["round"] for r in results if r["selection"] == "best_val"} == {2}
