"""report.html in a real browser (Debian's headless Chromium): Markdown rendered, none left raw."""

import re

from pflpipe.metrics import table_from_records
from pflpipe.report.report_writer import ReportContext, build_report, write_report

#: What raw Markdown looks like in a page's text: emphasis, inline code, a link.
RAW = re.compile(r"\*\*|`|\]\(")


def _report(tmp_path):
    """A report whose paragraphs carry emphasis and code: a compute warning, stability notes."""
    history = []
    for model, samples in (("pfedvem", 500), ("pfedme", 50)):
        for r in (1, 2, 3):
            history += [{"seed": 0, "model": model, "round": r, "client": c, "split": "train",
                         "steps": 1, "samples": samples, "bytes_sent": 1, "bytes_received": 1}
                        for c in range(3)]
            history += [{"seed": 0, "model": model, "round": r, "client": c, "split": "test",
                         "accuracy": 0.9 - 0.1 * (model == "pfedme") * (r == 3), "scope": ""}
                        for c in range(3)]
    table = table_from_records([
        {"client": c, "model": m, "accuracy": 0.6 + 0.1 * c, "split": "test",
         "selection": s} for c in range(3) for m in ("local", "fedavg", "pfedvem", "pfedme")
        for s in ("best_val", "last_round")])
    report = build_report(table, context=ReportContext(history=tuple(history)))
    return write_report(report, tmp_path / "report")


def test_report_html_shows_no_raw_markdown(tmp_path, browser):
    from selenium.webdriver.common.by import By

    files = _report(tmp_path)
    assert "**Warning.**" in files.markdown.read_text()   # the Markdown report has it raw

    browser.get(files.html.as_uri())
    text = browser.find_element(By.TAG_NAME, "body").text

    assert "Unequal compute: pfedvem processed 10×" in text
    assert not RAW.search(text), RAW.search(text).group(0)
    bold = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "p strong")]
    assert "Warning." in bold
