"""What `pflpipe run` prints when it is done: where each model's state_dicts are."""

import io
import json
from types import SimpleNamespace

from rich.console import Console

from pflpipe.cli.run_verb import Progress, _summary


def test_summary_lists_per_client_models_apart_from_fedavgs_one_global_model(tmp_path):
    seed = tmp_path / "runs" / "r" / "seed-0"
    for model, files in (("fedavg", ["global.pt", "global_best_val.pt"]),
                         ("fedper", ["client_0000.pt", "client_0001.pt"]),
                         ("local", ["client_0000.pt"])):
        (seed / model / "models").mkdir(parents=True)
        for name in files:
            (seed / model / "models" / name).write_bytes(b"")
    report = tmp_path / "runs" / "r" / "report"
    report.mkdir()
    answer = "Best performing on test: fedper " + "and a long reason " * 20
    (report / "report.json").write_text(json.dumps({"answer": answer}))
    out = io.StringIO()

    _summary(Console(file=out, width=400), tmp_path / "runs" / "r",
             {"report": report, "seed-0": seed}, SimpleNamespace(run_id=""), tmp_path, 1.0)

    lines = out.getvalue().splitlines()
    words = " ".join(lines).split()
    at = words.index("seed-0")
    assert words[at + 1:at + 10] == [f"{seed}/<model>/models/client_*.pt", "(fedper,", "local);",
                                     "fedavg/models/", "(one", "global", "model)", "per-client",
                                     "table"]
    # every line within 160 characters (issue 48); the answer is the last paragraph, its words kept
    assert max(map(len, lines)) <= 160
    closing = lines[len(lines) - lines[::-1].index(""):]
    assert len(closing) == 3 and " ".join(closing).split() == answer.split()


def test_a_stage_note_past_160_characters_continues_on_lines_six_spaces_in():
    note = ("compute: persfl processed 4.25× the samples of fedper, the warm start included: by "
            "design, its method makes 30 network passes per sample and epoch where FedAvg makes "
            "1. Read persfl's scores as those of a method that costs more.")
    task = SimpleNamespace(title="evaluate_fairness", seconds=18.1, status="SUCCESS",
                           reused=False, notes=[note], progress=None)
    out = io.StringIO()

    Progress(Console(file=out, width=400)).event("finished", task)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"  ✓ {'evaluate_fairness':<40} {'18.1 s':>8}  compute: persfl")
    assert len(lines) == 2 and all(len(line) <= 160 for line in lines)
    assert lines[1].startswith(" " * 6) and lines[1][6] != " "
    assert " ".join(lines).split()[4:] == note.split()
