"""A sweep in the MLflow UI, in a real browser: the points side by side under the sweep's run.

The smallest sweep that shows the comparison (digits, DS-2, 3 clients, 1 round, 1 seed, the local
baseline beside the FedAvg warm start, `partition.alpha: [0.1, 1.0]`) runs with the CLI on
kfp.local, tracking into a real `mlflow server` on 127.0.0.1. Headless Chromium opens the address
the run printed, expands the sweep's parent run and shows, per point, its label, its swept
setting (param ``sweep.partition.alpha``), its split (the Dataset column) and each model's mean
test accuracy; the screenshot is left in test-artifacts/mlflow-sweep.png.
"""

import json

import pytest
from test_quickstart import ARTIFACTS, EXPAND, NAME_CELL, _column, _show_column, pflpipe_cli

from pflpipe import layout

SPEC = """\
experiment: {name: sweep-ui, seeds: [0]}
dataset: {name: digits}
partition: {strategy: ds2, n_clients: 3, alpha: 0.5}
federation: {rounds: 1, lr: 0.3}
personalization: [{name: local, epochs: 1}]
sweep: {partition.alpha: [0.1, 1.0]}
"""
POINTS = {"point alpha=0.1": "0.1", "point alpha=1.0": "1.0"}
PARENT = "sweep-ui · sweep of partition.alpha (2 points) · fedavg · seed 0"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, mlflow_server):
    """Run the sweep with the CLI; return its results' latest folder and the printed UI address."""
    work = tmp_path_factory.mktemp("sweep-ui")
    (work / "sweep.yaml").write_text(SPEC)
    done = pflpipe_cli("run", "sweep.yaml", cwd=work, tracking_uri=mlflow_server)
    assert done.returncode == 0, done.stdout + done.stderr
    (url,) = [w for w in done.stdout.split() if "workflowType=machine_learning" in w]
    return work / "results" / "sweep-ui" / layout.LATEST, url


def test_mlflow_ui_compares_the_points_of_a_sweep(sweep, browser):
    """Expand the sweep's run: a row per point with its alpha, its split and its accuracies."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    latest, url = sweep
    wait = WebDriverWait(browser, 90)
    names = f"{NAME_CELL} a span"

    def shown(cell: str) -> dict[str, str]:
        return _column(browser, By, names, cell)

    browser.get(url)
    wait.until(lambda _: PARENT in shown(NAME_CELL))
    cell = next(c for c in browser.find_elements(By.CSS_SELECTOR, NAME_CELL)
                if [e.text for e in c.find_elements(By.CSS_SELECTOR, "a span")] == [PARENT])
    cell.find_element(By.CSS_SELECTOR, EXPAND).click()
    wait.until(lambda _: set(POINTS) <= set(shown(NAME_CELL)))

    for metric in ("sweep.partition.alpha", "fedavg.test.AA", "local.test.AA"):
        _show_column(browser, wait, metric, By, Keys)
    alpha = "[col-id='params.`sweep.partition.alpha`']"
    wait.until(lambda _: all(shown(alpha).get(p) == v for p, v in POINTS.items()))
    datasets = shown("[col-id='attributes.`Dataset`']")
    for point, value in POINTS.items():   # each point's own split, named by its alpha
        assert f"digits-ds2(alpha={value})-seed0" in datasets[point], datasets

    facts = {p["label"]: p["models"]
             for p in json.loads((latest / layout.REPORT_FOLDER / layout.SWEEP_JSON).read_text())
             ["points"]}
    for model in ("fedavg", "local"):   # the report's means, one column per model
        column = shown(f"[col-id='metrics.`{model}.test.AA`']")
        for point in POINTS:
            mean = facts[point.removeprefix("point ")][model]["mean"]
            assert float(column[point]) == pytest.approx(mean, abs=5e-4), (model, column)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "mlflow-sweep.png"))

    # select the points' runs and compare them: their alphas and accuracies side by side
    for row in browser.find_elements(By.CSS_SELECTOR, ".ag-pinned-left-cols-container .ag-row"):
        if row.find_element(By.CSS_SELECTOR, f"{NAME_CELL} a span").text in POINTS:
            row.find_element(By.CSS_SELECTOR, "input[type='checkbox']").click()
    next(b for b in browser.find_elements(By.CSS_SELECTOR, "button")
         if b.text.strip() == "Compare").click()
    wait.until(lambda b: "compare-runs" in b.current_url)
    page = lambda: browser.find_element(By.TAG_NAME, "body").text  # noqa: E731
    wait.until(lambda _: all(p in page() for p in POINTS) and "fedavg.test.AA" in page())
    for needed in ("sweep.partition.alpha", "local.test.AA"):
        assert needed in page(), needed
    assert browser.save_screenshot(str(ARTIFACTS / "mlflow-sweep-compare.png"))
