"""The MLflow UI of a scale run in a real browser: how long its pages take and what they show.

    python benchmarks/scale.py --clients 1000 --work /tmp/scale      # leaves clients-1000/
    python benchmarks/mlflow_ui.py /tmp/scale/clients-1000 [--model ditto] [--shots DIR]

Serves the run folder's MLflow store (its ``mlflow.db`` and ``mlartifacts/``) with a real
``mlflow server`` on 127.0.0.1, opens headless Chromium (/usr/bin/chromium, through selenium)
and, for each page, measures the time from asking for the page until it shows what a user came
for: the experiment's runs page until every top-level run's name is on screen; one model's run
page until its name and metrics are; its per-client table (the ``clients/final.json`` artifact,
`pflpipe.tracking.vocabulary.CLIENTS_TABLE`, which MLflow shows as a table in pages) until its
first columns and the first client's first value are (and how many of that row's values are on
screen: a column MLflow cannot show leaves its cells empty). Prints each time, what the page
shows (its runs, the table's rows and columns) and where its screenshot is. Nothing here is a
test: the times depend on the machine (the load average is printed).
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(folder: Path, port: int) -> subprocess.Popen:
    """Start ``mlflow server`` on the folder's store; return once it answers."""
    mlflow = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "mlartifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return server
        except OSError:
            if server.poll() is not None:
                sys.exit(f"mlflow server exited: {server.stderr.read()[-2000:]}")
            time.sleep(0.5)
    server.kill()
    sys.exit("mlflow server did not answer within 120 s")


def browser():
    """Headless Chromium through selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1600,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def timed_page(driver, url: str, needles: list[str], shot: Path, limit: float = 120
               ) -> tuple[float, str]:
    """Open `url`; seconds until every needle is in the page's text, and that text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.monotonic()
    driver.get(url)
    try:
        WebDriverWait(driver, limit, poll_frequency=0.05).until(
            lambda d: all(n in d.execute_script("return document.body.innerText")
                          for n in needles))
    except TimeoutException:
        driver.save_screenshot(str(shot))
        text = driver.execute_script("return document.body.innerText")
        missing = [n for n in needles if n not in text]
        sys.exit(f"{url}: not shown within {limit:.0f} s: {missing} ({shot}); the page says:\n"
                 f"{text[:3000]}")
    seconds = time.monotonic() - start
    driver.save_screenshot(str(shot))
    return seconds, driver.execute_script("return document.body.innerText")


def _cell(value) -> str:
    """The start of a value as a table cell shows it (its first 6 characters; 5.0 as 5)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return "" if value is None else str(value)[:6]


def main() -> int:
    """Serve the store, open the pages, print the times and what they show."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a run folder of benchmarks/scale.py "
                        "(holding mlflow.db and mlartifacts/)")
    parser.add_argument("--model", default="ditto", help="whose run and table to open")
    parser.add_argument("--shots", type=Path, help="where the screenshots go (default: a "
                        "temporary folder)")
    args = parser.parse_args()
    folder = args.folder.absolute()
    shots = (args.shots or Path(tempfile.mkdtemp(prefix="pflpipe-mlflow-ui-"))).absolute()
    shots.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    server = serve(folder, port)
    print(f"mlflow server on {url} for {folder} (up in {time.monotonic() - started:.1f} s; "
          f"load {os.getloadavg()[0]:.1f})")
    try:
        from mlflow import MlflowClient

        client = MlflowClient(url)
        runs = client.search_runs(
            [e.experiment_id for e in client.search_experiments()
             if e.name != "Default"], max_results=1000)
        (experiment,) = {r.info.experiment_id for r in runs}
        (model,) = [r for r in runs if r.info.run_name == args.model]
        table_path = client.download_artifacts(model.info.run_id, "clients/final.json")
        table = json.loads(Path(table_path).read_text())
        names = sorted(r.info.run_name for r in runs)
        print(f"experiment {experiment}: {len(runs)} runs ({', '.join(names)}); "
              f"{args.model}'s clients/final.json: {len(table['data'])} rows x "
              f"{len(table['columns'])} columns ({', '.join(table['columns'][:6])}, ...)")
        driver = browser()
        try:
            pages = [
                ("experiment page (every run's name)", f"{url}/#/experiments/{experiment}/runs",
                 [r.info.run_name for r in runs if "mlflow.parentRunId" not in r.data.tags]),
                (f"{args.model}'s run page (name and metrics)",
                 f"{url}/#/experiments/{experiment}/runs/{model.info.run_id}",
                 [args.model, "Metrics (", "test_accuracy"]),
                (f"{args.model}'s per-client table (clients/final.json: its first page)",
                 f"{url}/#/experiments/{experiment}/runs/{model.info.run_id}/artifacts/"
                 "clients/final.json", ["View as table", *table["columns"][:2],
                                        _cell(table["data"][0][1])])]
            for number, (what, page, needles) in enumerate(pages, 1):
                shot = shots / f"{number}.png"
                seconds, text = timed_page(driver, page, needles, shot)
                shown = re.findall(r"Metrics \(\d+\)|Parameters \(\d+\)", text)
                if "View as table" in text:   # the first row's values, as the cells show them
                    cells = [_cell(v) for v in table["data"][0][1:4]]   # in the window's width
                    shown.append(f"the first row's next {len(cells)} values on screen: "
                                 f"{sum(bool(c) and c in text for c in cells)}")
                print(f"  {what}: {seconds:.1f} s ({shot}){'; ' if shown else ''}"
                      f"{', '.join(shown)}")
        finally:
            driver.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
