"""The stages without a validation split, and what they do with an earlier run's checkpoints.

Every stage runs in-process on digits (4 clients, a few rounds), as the pipeline chains them.
"""

import json

import pytest
import torch

from pflpipe import events
from pflpipe.report.report_writer import NO_VALIDATION
from pflpipe.spec import parse_spec
from pflpipe.stages import (
    collect_results,
    distill_grid_search,
    evaluate_fairness,
    partition_data,
    personalize,
    select_teachers,
    train_local,
    warm_start_fedavg,
)
from pflpipe.training import csv_tables

TRAIN_TEST = """\
experiment: {{name: t, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4,
             fractions: {{train: 0.75, test: 0.25}}}}
federation: {{rounds: 3}}
personalization: [{{name: persfl}}, {{name: fedper, rounds: 2}}, {{name: local, epochs: 4}}]
distillation: {{epochs: 1, lambdas: [0.0, 0.5], temperatures: [1.0, 4.0]}}
tracking: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def without_validation(tmp_path_factory):
    work = tmp_path_factory.mktemp("noval")
    spec = parse_spec(TRAIN_TEST.format(out=work / "results"))
    partition_data.run(spec, 0, work / "partition")
    warm_start_fedavg.run(spec, 0, work / "partition", work / "checkpoints", work / "fedavg")
    train_local.run(spec, 0, work / "partition", work / "local")
    personalize.run(spec, 0, "fedper", work / "partition", work / "checkpoints", work / "fedper")
    teachers = select_teachers.run(spec, work / "checkpoints", work / "teachers")
    distill = distill_grid_search.run(spec, 0, work / "partition", work / "checkpoints",
                                      work / "teachers", work / "persfl")
    models = ("fedavg", "local", "fedper", "persfl")
    collect_results.run(spec, 0, [work / m for m in models], work / "collected")
    evaluate_fairness.run(spec, [work / "collected"], work / "report")
    return work, teachers, distill


def test_without_validation_every_model_is_its_last_round_and_only_test_is_reported(
        without_validation):
    work, _, _ = without_validation

    rows = csv_tables.read_csv(work / "collected" / "results.csv")

    assert {row["split"] for row in rows} == {"test"}
    by_key = {(r["model"], r["client"], r["selection"]): r for r in rows}
    for (model, client, selection), row in by_key.items():
        if selection == "best_val":
            last = by_key[(model, client, "last_round")]
            assert (row["round"], row["accuracy"]) == (last["round"], last["accuracy"])
    rounds = {r["model"]: int(r["round"]) for r in rows}
    assert rounds == {"fedavg": 3, "local": 4, "fedper": 2, "persfl": 3}
    history = csv_tables.read_csv(work / "fedper" / "history.csv")
    assert {row["split"] for row in history} == {"train", "test"}  # no NaN val rows


def test_without_validation_teachers_are_the_last_round_and_lambda_t_is_chosen_on_train(
        without_validation):
    work, teachers, distill = without_validation

    grid = csv_tables.read_csv(work / "persfl" / "grid.csv")

    assert teachers.criterion == "last round: no validation split"
    assert [t["round"] for t in teachers.teachers] == [3, 3, 3, 3]
    assert distill.selection_split == "train" and "(no validation split)" in distill.to_markdown()
    for chosen in distill.chosen:
        client = [float(r["train_accuracy"]) for r in grid if int(r["client"]) == chosen["client"]]
        assert chosen["train_accuracy"] == max(client)


def test_without_validation_the_report_states_the_selection_rule(without_validation):
    work, _, _ = without_validation

    report = json.loads((work / "report" / "report.json").read_text())

    assert NO_VALIDATION in report["protocol"]
    assert NO_VALIDATION in (work / "report" / "report.md").read_text()


# ---- checkpoints of an earlier run: resume all, unfinished or none -------------------------------

WARM = """\
experiment: {{name: t, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: iid, n_clients: 4}}
federation: {{rounds: 3}}
engine: {{threads: 1}}
"""


class Interrupted(Exception):
    pass


def stop_after_round_1(round_idx, rows):
    if round_idx == 1:
        raise Interrupted


@pytest.fixture
def warm(tmp_path, capsys):
    """Run the warm start of WARM with a `resume` mode; return results.csv and the notes."""
    threads = torch.get_num_threads()  # engine.threads sets them for the whole process
    spec = parse_spec(WARM.format(out=tmp_path / "results"))
    partition_data.run(spec, 0, tmp_path / "partition")

    def run(resume: str, name: str, on_round=None) -> tuple[list[dict], str]:
        capsys.readouterr()
        warm_start_fedavg.run(spec, 0, tmp_path / "partition", tmp_path / name / "checkpoints",
                              tmp_path / name / "fedavg", on_round=on_round, resume=resume)
        notes = [e["text"] for e in map(events.parse, capsys.readouterr().out.splitlines())
                 if e is not None and e["event"] == "notice"]
        return csv_tables.read_csv(tmp_path / name / "fedavg" / "results.csv"), "\n".join(notes)
    yield run
    torch.set_num_threads(threads)


def test_resume_continues_an_interrupted_stage_to_the_uninterrupted_result(warm, tmp_path):
    spec = parse_spec(WARM.format(out=tmp_path / "elsewhere"))
    partition_data.run(spec, 0, tmp_path / "p2")
    warm_start_fedavg.run(spec, 0, tmp_path / "p2", tmp_path / "c2", tmp_path / "straight")
    with pytest.raises(Interrupted):
        warm("all", "first", on_round=stop_after_round_1)

    # --no-cache resumes what an earlier run left unfinished
    rows, notes = warm("unfinished", "second")

    assert "resumed from round 1/3" in notes
    assert rows == csv_tables.read_csv(tmp_path / "straight" / "results.csv")


def test_finished_checkpoints_are_reused_by_default_and_recomputed_otherwise(warm):
    first, notes = warm("all", "a")
    assert "resumed" not in notes and "reused" not in notes

    reused, reused_notes = warm("all", "b")
    recomputed, no_cache_notes = warm("unfinished", "c")
    fresh, fresh_notes = warm("none", "d")

    assert "reused finished checkpoints (round 3/3): nothing trained" in reused_notes
    assert ("recomputed: discarded the checkpoints of round 3/3 (--no-cache recomputes finished "
            "stages)") in no_cache_notes
    assert "recomputed: discarded the checkpoints of round 3/3 (--fresh)" in fresh_notes
    assert first == reused == recomputed == fresh


def test_engine_threads_reach_the_stage(warm):
    torch.set_num_threads(2)

    _, notes = warm("all", "threads")

    assert torch.get_num_threads() == 1
    assert "1 torch thread" in notes.splitlines()
