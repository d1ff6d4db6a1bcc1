"""What the report page says: no small lies (data row, Markdown in HTML, the headline, the
per-client axis, a top-samples decile of equal clients)."""

import json

import pytest

from pflpipe.metrics import table_from_records
from pflpipe.report import score_curves as curves
from pflpipe.report.report_writer import ReportContext, build_report, write_report
from pflpipe.spec import Spec
from pflpipe.stages import evaluate_fairness


def records(splits=("test",), n_samples=None, values=(0.89, 0.96, 0.93)):
    return [{"client": c, "model": m, "split": split, "accuracy": value - 0.01 * i,
             **({"n_samples": n_samples(c)} if n_samples else {})}
            for split in splits for i, m in enumerate(("local", "fedavg", "fedper"))
            for c, value in enumerate(values)]


def test_the_data_row_counts_a_predefined_files_clients(tmp_path):
    # "arrays, predefined, None clients" when partition.n_clients is omitted
    spec = Spec.model_validate({"experiment": {"name": "t"},
                                "dataset": {"name": "arrays", "path": "d.npz"},
                                "partition": {"strategy": "predefined", "path": "split.json"}})
    seed = tmp_path / "seed-0"
    (seed / "partition").mkdir(parents=True)
    (seed / "collected.json").write_text(json.dumps({"seed": 0, "models": []}))
    (seed / "partition" / "manifest.json").write_text(json.dumps({"clients": [
        {"n": {"train": 4, "val": 0, "test": 2}} for _ in range(3)]}))

    context = evaluate_fairness.context(spec, [seed], {})

    assert context.run["data"] == "arrays, predefined, 3 clients"
    assert context.plan.train_samples == 12


def test_report_html_renders_the_markdown_of_its_paragraphs(tmp_path):
    history = tuple({"seed": 0, "model": m, "round": 1, "client": 0, "split": "train",
                     "samples": n, "steps": 1, "bytes_sent": 0, "bytes_received": 0}
                    for m, n in (("fedper", 10), ("ditto", 100), ("local", 1)))
    table = table_from_records(records() + [{**r, "model": "ditto"} for r in records()
                                            if r["model"] == "fedper"])

    files = write_report(build_report(table, context=ReportContext(history=history)),
                         tmp_path / "report")

    html = files.html.read_text()
    assert "**Warning.**" in files.markdown.read_text()
    assert "<p><strong>Warning.</strong> Unequal compute: ditto processed 10×" in html
    assert "**" not in html


def test_the_headline_answers_leave_out_the_split_the_models_were_chosen_on():
    report = build_report(table_from_records(records(("test", "val"))))

    assert "Best performing on test" in report.answers()
    assert "on val" not in report.answers()
    answers = report.to_markdown().split("## Answers")[1].split("##")[0]
    assert "Best performing on test" in answers and "on val" not in answers
    assert "Best performing on val" in report.to_markdown()   # in the val split's own section


def test_the_per_client_axis_starts_near_the_lowest_bar_and_says_so(tmp_path):
    report = build_report(table_from_records(records()))
    summary = report.primary

    figure = curves.client_bars_figure(summary)

    # lowest bar 0.89 − 0.02 = 0.87 (fedper's client 0): 2 points below, down to 5 points: 0.85
    assert figure.axes[0].get_ylim() == pytest.approx((0.85, 1.02))
    markdown = write_report(report, tmp_path).markdown.read_text()
    assert "(mean over seeds; error bars: std over seeds). The axis starts at 0.8500, not at 0." \
        in markdown


def test_a_top_samples_decile_of_equal_clients_is_said_to_be_the_bottom_decile():
    equal = build_report(table_from_records(records(n_samples=lambda c: 30)))
    unequal = build_report(table_from_records(records(n_samples=lambda c: 30 + c)))

    note = "top_samples_decile: every client holds the same number of samples on this split"
    assert note in equal.to_markdown() and note not in unequal.to_markdown()
    values = equal.primary.models["fedavg"].mean
    assert values["accuracy.top_samples_decile"] == values["accuracy.min"]
