"""The written report: report.json layout, report.md tables, self-contained report.html, PNGs."""

import base64
import json
import re
from html.parser import HTMLParser

import pytest

from pflpipe.metrics import table_from_records
from pflpipe.report.report_writer import ALL_METRICS, build_report, write_report
from pflpipe.spec.sections import METRICS

PNG = b"\x89PNG\r\n\x1a\n"


def rows() -> list[dict]:
    # Two seeds, test and val, fractions. Per client (local, fedavg, x, y):
    #   x improves client 0 by 0.25 and loses 0.125 on client 1; y improves both by 0.125.
    accs = {"local": [0.5, 0.5], "fedavg": [0.25, 0.625], "x": [0.75, 0.5], "y": [0.625, 0.75]}
    return [{"seed": s, "split": sp, "client": c, "model": m, "accuracy": a[c]}
            for s in (0, 1) for sp in ("test", "val") for m, a in accs.items() for c in (0, 1)]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    report = build_report(table_from_records(rows(), "hand.csv"))
    return report, write_report(report, out)


def test_report_json_has_the_required_layout(written):
    _, files = written
    data = json.loads(files.json.read_text())
    x = data["models"]["x"]
    assert set(x["performance"]) == {"PUI", "PUD", "MPI", "API", "MPD", "APD", "AA"}
    assert set(x["fairness"]) == {"improved", "decreased", "accuracy"}
    for group in x["fairness"].values():
        assert set(group) == {"AV", "CS", "Entropy", "JI"}
    assert {"best", "fairest", "splits", "rules", "protocol", "unit"} <= set(data)
    assert set(data["splits"]) == {"test", "val"} and data["primary_split"] == "test"


def test_report_json_holds_hand_computed_values(written):
    data = json.loads(written[1].json.read_text())
    x, y = data["models"]["x"], data["models"]["y"]
    # x: QoI = [0.75 − 0.5, 0.5 − 0.625] = [0.25, −0.125] → PUI 50, API 0.25, APD −0.125.
    assert (x["performance"]["PUI"], x["performance"]["API"], x["performance"]["APD"]) == (
        50.0, 0.25, -0.125)
    # y: QoI = [0.125, 0.125] → PUI 100, JI over U⁺ 1, no U⁻ (null with a reason).
    assert y["performance"]["PUI"] == 100.0 and y["fairness"]["improved"]["JI"] == 1.0
    assert y["performance"]["MPD"] is None
    assert y["reasons"]["performance.MPD"].startswith("U⁻ is empty")
    # Same values on both seeds: std over seeds is 0.
    assert y["std_over_seeds"]["performance"]["AA"] == 0.0
    # The vote: y wins PUI, PUD, MPD, APD (no loss) and AA (0.6875 vs 0.625) → best; JI etc.
    # → fairest.
    decisions = data["splits"]["test"]["decisions"]
    assert (decisions["best"]["model"], decisions["fairest"]["model"]) == ("y", "y")
    # Gated: y is 0.0625 ahead of x on both seeds, with no spread: two identical gaps are no
    # evidence (no interval, no test), so no best is named; JI over U⁺ is 1 for both (x's U⁺
    # is one client) → no spread either, no fairest named.
    assert (data["best"], data["fairest"]) == (None, None)
    assert data["verdicts"]["fairest"]["top"] == ["y", "x"]
    (pair,) = data["verdicts"]["best"]["pairs"]
    assert (pair["p_holm"], pair["resolved"], pair["ci_low"], pair["ci_high"]) == (
        1.0, False, None, None)
    assert pair["reason"] == ("every one of the 2 seeds shows the same gap (+0.0625): its spread "
                              "cannot be estimated")
    assert data["unit"] == "fraction"
    assert data["models"]["local"]["role"] == "local baseline"


def test_report_markdown_has_the_thesis_tables_and_the_rules(written):
    text = written[1].markdown.read_text()
    assert "| Client | local | fedavg | x | y |" in text
    # the best value of each row is bold: client 0's best model is x, the best mean is y's
    assert "| Client 0 | 0.5000 | 0.2500 | **0.7500** | 0.6250 |" in text
    assert "| Avg Acc | 0.5000 | 0.4375 | 0.6250 | **0.6875** |" in text
    assert "| PUI ↑ | 50.0 ± 0.0 | **100.0 ± 0.0** |" in text
    assert "Best performing on test: y" in text
    assert "Fairest on test: y and x are indistinguishable here (ΔJI +0.000" in text
    assert "Test is never used to choose" in text
    assert "Equal numbers of wins are broken by AA" in text
    assert "figures/qoi_test.png" in text and "figures/client_accuracy_test.png" in text


def test_report_html_is_self_contained_with_the_figures_embedded(written):
    _, files = written
    page = files.html.read_text()
    assert '<td class="best"><strong>0.6875</strong></td>' in page

    class Images(HTMLParser):
        sources: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.sources.append(dict(attrs)["src"])

    parser = Images()
    parser.feed(page)
    assert len(parser.sources) == 6  # per-client bars, QoI and fairness for test and val
    assert all(src.startswith("data:image/png;base64,") for src in parser.sources)
    embedded = {base64.b64decode(src.split(",", 1)[1]) for src in parser.sources}
    assert embedded == {path.read_bytes() for path in files.figures}
    # nothing loaded from elsewhere; the legends link to the page's own glossary section
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)
    assert 'href="#words-and-abbreviations"' in page and 'id="words-and-abbreviations"' in page


def test_report_writes_png_figures(written):
    for path in written[1].figures:
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5_000


def test_report_markdown_shows_only_the_chosen_metrics():
    report = build_report(table_from_records(rows()), metrics=("AA", "JI"))
    text = report.to_markdown()
    assert "| JI ↑ |" in text and "| AA ↑ |" in text
    assert "| PUI ↑ |" not in text and "| AV ↓ |" not in text
    assert report.to_json()["models"]["x"]["performance"]["PUI"] == 50.0  # JSON keeps all


def test_report_rejects_an_unknown_metric():
    with pytest.raises(ValueError, match="unknown metric"):
        build_report(table_from_records(rows()), metrics=("AA", "Gini"))


def test_report_knows_every_metric_the_spec_allows():
    assert set(ALL_METRICS) == set(METRICS)


def test_report_without_personalized_models_still_renders(tmp_path):
    base = [{"client": c, "model": m, "accuracy": 50 + c} for c in range(3)
            for m in ("local", "fedavg")]
    files = write_report(build_report(table_from_records(base)), tmp_path)
    data = json.loads(files.json.read_text())
    assert data["best"] is None
    assert "no personalized model" in data["splits"]["test"]["decisions"]["best"]["reason"]
    assert data["unit"] == "percent"
    assert all(p.read_bytes().startswith(PNG) for p in files.figures)


def test_regression_report_names_its_score_negative_mse(tmp_path):
    """A regression's report says −MSE wherever a classification's says accuracy."""
    from pflpipe.report.report_writer import ReportContext
    from pflpipe.report.results_reader import read_table

    mse = {"local": [0.5, 0.25], "fedavg": [0.25, 1.0], "x": [0.125, 0.5]}
    path = tmp_path / "results.csv"
    path.write_text("client,model,split,accuracy,loss\n" + "".join(
        f"{c},{m},test,nan,{v[c]}\n" for m, v in mse.items() for c in (0, 1)))
    history = tuple({"model": m, "split": "test", "round": r, "accuracy": "nan",
                     "loss": v[0] * r} for m, v in mse.items() for r in (1, 2))
    report = build_report(read_table([path]), context=ReportContext(history=history))
    files = write_report(report, tmp_path / "report")
    text = files.markdown.read_text()

    assert report.unit == "neg_mse"
    for heading in ("### Per-client −MSE (thesis Table 6.2 style", "### −MSE summaries",
                    "### Fairness on per-client MSE"):
        assert heading in text
    assert "| Avg −MSE | -0.3750 | -0.6250 | **-0.3125** |" in text
    assert "−MSE over rounds, one panel per model" in text
    assert "personalized −MSE P" in text
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert not [h for h in headings if "ccuracy" in h]
    assert (tmp_path / "report" / "figures" / "accuracy_rounds_test.png").is_file()
