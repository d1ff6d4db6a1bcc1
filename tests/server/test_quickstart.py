"""The README's quickstart, for real: `pflpipe run specs/persfl-digits.yaml` as a user runs it.

One process per run of the CLI, the pipeline on kfp.local's SubprocessRunner (one subprocess per
task), tracking into a real `mlflow server` on 127.0.0.1 (sqlite backend) through
$MLFLOW_TRACKING_URI. The quickstart spec is taken unchanged from specs/: digits, DS-2, 10 clients,
the FedAvg warm start, PersFL, FedPer, the local baseline and the fairness evaluation.

A second run, through the Python API (`pflpipe.run`), adds an algorithm to the same spec: every
stage that already ran comes from the cache, only the new algorithm's stage and the two stages
that track and report run. The MLflow UI of these runs is then opened in headless Chromium
(tests/server/test_mlflow_ui.py).
"""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from client_tables import client_history, client_table
from mlflow import MlflowClient

import pflpipe
from pflpipe.engine.records import ADAPTATION
from pflpipe.tracking.vocabulary import CLIENT_HISTORY_TABLE

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "specs" / "persfl-digits.yaml"
N_CLIENTS = 10
MODELS = {"fedavg", "local", "persfl", "fedper"}
ADDED = {"name": "fedavg_ft", "epochs": 2}
#: The stages that run on every pipeline run: they track into the run's MLflow parent.
ALWAYS = {"collect_results · seed 0", "evaluate_fairness"}


def pflpipe_cli(*args: str, cwd: Path, tracking_uri: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "COLUMNS": "200"}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, mlflow_server):
    """Run the quickstart with the CLI, then the same spec plus fedavg_ft with `pflpipe.run`."""
    work = tmp_path_factory.mktemp("quickstart")
    (work / "specs").mkdir()
    shutil.copy(QUICKSTART, work / "specs" / QUICKSTART.name)
    first = pflpipe_cli("run", f"specs/{QUICKSTART.name}", cwd=work, tracking_uri=mlflow_server)
    assert first.returncode == 0, first.stdout + first.stderr

    spec = yaml.safe_load(QUICKSTART.read_text())
    cwd, uri = Path.cwd(), os.environ.get("MLFLOW_TRACKING_URI")
    os.chdir(work)
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_server
    try:
        second = pflpipe.run(f"specs/{QUICKSTART.name}", quiet=True,
                             personalization=[*spec["personalization"], ADDED])
    finally:
        os.chdir(cwd)
        if uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI")
        else:
            os.environ["MLFLOW_TRACKING_URI"] = uri
    return work / "results" / spec["experiment"]["name"], first, second, spec


def results_rows(seed_dir: Path) -> list[dict]:
    with (seed_dir / "results.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_run_says_where_the_report_models_and_mlflow_run_are(quickstart):
    results, first, _, _ = quickstart
    out = first.stdout
    assert "Traceback" not in out + first.stderr
    for stage in ("partition_data", "warm_start_fedavg", "train_local", "select_teachers",
                  "distill_grid_search", "personalize[fedper]", "evaluate_fairness"):
        assert f"✓ {stage}" in out, stage
    assert "report.html" in out and "MLflow   run " in out
    assert "Best performing on test:" in out
    # the UI link opens on the runs view (MLflow 3.17 ignores the experiment's kind tag)
    assert "?workflowType=machine_learning" in out


def test_adding_an_algorithm_runs_only_its_stage(quickstart):
    """Every stage of the first run is cached; the new algorithm's stage runs, and the two
    stages that track into the new MLflow parent run and write its report."""
    _, _, second, _ = quickstart
    ran = {title for title, status in second.stages if status == "SUCCESS"}
    cached = [title for title, status in second.stages if status == "CACHED"]

    assert ran == {"personalize[fedavg_ft] · seed 0"} | ALWAYS
    assert sorted(cached) == [f"{stage} · seed 0" for stage in (
        "distill_grid_search", "partition_data", "personalize[fedper]", "select_teachers",
        "train_local", "warm_start_fedavg")]


def test_every_client_of_every_model_is_scored_in_range(quickstart):
    results, _, second, _ = quickstart
    rows = [row for row in results_rows(second.seed_dirs[0]) if row["split"] == "test"
            and row["selection"] == "best_val" and row["scope"] == ""]
    by_model = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[int(row["client"])] = float(row["accuracy"])
    assert set(by_model) == MODELS | {"fedavg_ft"}
    for model, accuracy in by_model.items():
        assert sorted(accuracy) == list(range(N_CLIENTS)), model
        assert all(0.0 <= a <= 1.0 for a in accuracy.values()), model
        assert sum(accuracy.values()) / N_CLIENTS > 0.8, model
    mean = {m: sum(a.values()) / N_CLIENTS for m, a in by_model.items()}
    assert mean["persfl"] > mean["local"] and mean["persfl"] > mean["fedavg"]
    for model in MODELS - {"fedavg"}:  # FedAvg's model is the one global model
        models = sorted((second.seed_dirs[0] / model / "models").glob("client_*.pt"))
        assert len(models) == N_CLIENTS, model


def test_quickstart_shows_persfl_choosing_teachers_and_distillation(quickstart):
    """Teachers are not all the last round and λ is not mostly 0 (issue 18, item 7)."""
    results, *_ = quickstart
    with (results / "latest" / "seed-0" / "persfl" / "chosen.csv").open(newline="") as handle:
        chosen = list(csv.DictReader(handle))
    rounds = yaml.safe_load(QUICKSTART.read_text())["federation"]["rounds"]
    assert sum(int(c["teacher_round"]) < rounds for c in chosen) >= N_CLIENTS // 2
    assert sum(float(c["lam"]) > 0 for c in chosen) >= 3


def test_reruns_publish_into_folders_of_their_own(quickstart):
    results, first, second, _ = quickstart
    runs = sorted((results / "runs").iterdir())
    assert len(runs) == 2 and runs[1] == second.run_dir
    assert (results / "latest").resolve() == second.run_dir.resolve()
    old = json.loads((runs[0] / "report" / "report.json").read_text())
    new = second.report
    assert "fedavg_ft" not in old["models"] and "fedavg_ft" in new["models"]
    assert str(runs[0].relative_to(results.parent.parent)) in first.stdout


def test_report_covers_every_model_client_and_the_run(quickstart):
    _, _, second, _ = quickstart
    report = second.report_dir
    html = second.report_html.read_text()
    figures = {f.name for f in (report / "figures").glob("*.png")}
    assert {"accuracy_rounds_test.png", "client_accuracy_test.png", "qoi_test.png",
            "fairness_test.png", "label_distribution.png", "teacher_rounds.png",
            "lambda_t.png"} <= figures
    for model in MODELS | {"fedavg_ft"}:
        assert model in html
    markdown = (report / "report.md").read_text()
    assert all(f"Client {c}" in markdown for c in range(N_CLIENTS))
    assert second.report["run"]["MLflow run"].startswith(second.mlflow_run_id)
    assert second.report["run"]["spec hash"] == second.spec.content_hash()
    # the link to the seed table resolves in the published run folder
    assert (report / second.report["tables"]["seed 0: results.csv"]).resolve().is_file()
    rows = second.results
    scope = rows["scope"].fillna("")
    assert (scope == "").sum() == 5 * 2 * 2 * N_CLIENTS  # models × splits × selections
    # each personalized row of an algorithm with a global model has its GA twin (scope global);
    # FedPer has none (its head is never sent), FedAvg's rows are its GA
    assert sorted(rows[scope == "global"]["model"].unique()) == ["fedavg_ft"]
    assert len(rows) == (5 + 1) * 2 * 2 * N_CLIENTS
    # the models tied at the top: one where the corrected paired test resolves the winner
    assert second.best and set(second.best) <= MODELS | {"fedavg_ft"}
    assert (len(second.best) == 1) == second.report["verdicts"]["best"]["resolved"]


def test_personalize_new_works_with_its_defaults_after_the_run(quickstart, mlflow_server):
    results, *_ = quickstart
    work = results.parent.parent
    newcomer = subprocess.run([sys.executable, "-c", README_NEWCOMER], cwd=work,
                              capture_output=True, text=True)
    assert newcomer.returncode == 0, newcomer.stderr

    joined = pflpipe_cli("personalize-new", f"specs/{QUICKSTART.name}", "--client-data",
                         "newcomer.npz", cwd=work, tracking_uri=mlflow_server)

    assert joined.returncode == 0, joined.stderr
    assert "teacher:  round " in joined.stdout and "**" not in joined.stdout
    assert (results / "newcomer" / "newcomer" / "model.pt").is_file()


def _readme_block(marker: str, page: str = "README.md") -> str:
    readme = (REPO / page).read_text()
    return readme.split(f"<!-- {marker} -->")[1].split("```")[1].strip()


README_NEWCOMER = _readme_block("newcomer-file", "docs/tutorial.md").removeprefix(
    "python -c ").strip('"')


@pytest.fixture(scope="module")
def server_runs(quickstart, mlflow_server):
    _, _, second, spec = quickstart
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(spec["experiment"]["name"])
    runs = client.search_runs([experiment.experiment_id], max_results=5000)
    parents = sorted((r for r in runs if "mlflow.parentRunId" not in r.data.tags),
                     key=lambda r: r.info.start_time)
    assert len(parents) == 2 and parents[1].info.run_id == second.mlflow_run_id
    first = parents[0].info.run_id
    mine = [r for r in runs if r.data.tags.get("root_run_id") == first]
    return client, experiment, parents, mine


def test_experiment_and_parent_run_say_what_they_hold(server_runs):
    _, experiment, parents, _ = server_runs
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert [p.info.run_name for p in parents] == [
        "persfl-digits · fedavg+persfl+fedper · seed 0",
        "persfl-digits · fedavg+persfl+fedper+fedavg_ft · seed 0"]
    description = parents[0].data.tags["mlflow.note.content"]
    assert "digits, ds2 over 10 clients" in description and "persfl, fedper" in description


def test_server_holds_the_parent_run_with_tags_fairness_and_report(server_runs):
    client, _, parents, _ = server_runs
    parent = parents[0]
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert len(tags["spec_hash"]) == 16 and len(tags["partition_hash.seed-0"]) == 64
    assert tags["seeds"] == "0" and set(tags["best.test"].split(", ")) <= MODELS
    assert tags["best.test.resolved"] in ("true", "false")
    assert "git_commit" in tags
    # fairness over every client's accuracy always exists; over the improved clients (U⁺) only
    # when some client improved on max(G, L), which the quickstart does not promise
    assert {"persfl.test.accuracy.JI", "fedper.test.PUI",
            "fedavg.test.AA"} <= set(parent.data.metrics)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "spec_resolved.yaml", "report", "seed-0"} <= artifacts
    report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/report.html" in report


def test_the_report_opens_its_links_when_copied_or_uploaded(quickstart, server_runs, tmp_path):
    """Every link of the report resolves inside its folder, copied alone or in MLflow."""
    from report_links import broken, links, undefined_abbreviations

    _, _, second, _ = quickstart
    client, *_ = server_runs
    copied = Path(shutil.copytree(second.report_dir, tmp_path / "report"))

    targets = set(links(copied))
    assert "tables/seed-0/results.csv" in targets and "figures/qoi_test.png" in targets
    assert broken(copied) == []
    assert "/kfp/" not in (copied / "report.md").read_text()
    # every abbreviation the report uses is defined in its own glossary (issue 48)
    assert undefined_abbreviations(copied) == []
    for target in targets:   # the parent run's artifacts hold the report folder as it is
        folder = f"report/{target}".rsplit("/", 1)[0]
        listed = {a.path for a in client.list_artifacts(second.mlflow_run_id, folder)}
        assert f"report/{target}" in listed, target


def test_server_holds_a_run_per_algorithm_with_its_clients_in_tables(server_runs):
    client, _, parents, runs = server_runs
    algorithms = {r.info.run_name: r for r in runs
                  if r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id}
    assert {name: r.data.tags["stage"] for name, r in algorithms.items()} == {
        "fedavg": "warm_start_fedavg", "local": "train_local", "persfl": "distill_grid_search",
        "fedper": "personalize"}
    assert len(runs) == len(algorithms)  # no run per client
    for name, run in algorithms.items():
        rows = client_table(client, run.info.run_id)
        assert [row["client"] for row in rows] == list(range(N_CLIENTS)), name
    assert all(r.info.status == "FINISHED" for r in runs)


def test_every_algorithm_logs_the_same_metric_vocabulary(server_runs):
    """So the chart view and Compare put every algorithm on one chart."""
    client, _, _, runs = server_runs
    per_round = {"train_loss", "val_loss", "val_accuracy", "test_loss", "test_accuracy"}
    final = {f"{s}.{m}" for s in ("best", "last")
             for m in ("val_loss", "val_accuracy", "test_loss", "test_accuracy", "round")}
    # what a client cost, per round (PersFL: per distillation epoch, its whole grid) and in
    # total; none of these models adapts before scoring (its total adaptation is 0)
    training = ("steps", "samples", "bytes_sent", "bytes_received")
    counted = ({f"compute.{n}" for n in training}
               | {f"compute.total.{n}" for n in (*training, *ADAPTATION)})
    extras = {"client", "round", "teacher_round", "lam", "temperature"}  # PersFL's choice
    for algorithm in MODELS:   # none with a global model (GA) beside FedAvg's own
        (run,) = [r for r in runs if r.info.run_name == algorithm]
        (row,) = [r for r in client_table(client, run.info.run_id) if r["client"] == 3]
        history = [r for r in client_table(client, run.info.run_id, CLIENT_HISTORY_TABLE)
                   if r["client"] == 3]
        names = {k for r in [row, *history] for k, v in r.items() if v is not None} - extras
        assert names == per_round | final | counted, algorithm
        assert row["compute.total.adaptation_samples"] == 0, algorithm
        tests = [r["test_accuracy"] for r in history if r.get("test_accuracy") is not None]
        assert len(tests) > 5 and all(0 <= value <= 1 for value in tests), algorithm
        # the algorithm's own run holds the mean over its clients, per round
        assert per_round | final <= set(run.data.metrics), algorithm


def test_global_model_is_scored_in_results_mlflow_and_report(quickstart, server_runs):
    """FedAvg-FT's global model (the warm start's) is scored (GA); FedPer and local have none."""
    results, _, second, _ = quickstart
    client, experiment, _, _ = server_runs
    rows = [r for r in results_rows(results / "latest" / "seed-0") if r["model"] == "fedavg_ft"
            and r["split"] == "test" and r["selection"] == "best_val"]
    ga = {int(r["client"]): float(r["accuracy"]) for r in rows if r["scope"] == "global"}
    pa = {int(r["client"]): float(r["accuracy"]) for r in rows if r["scope"] == ""}
    assert sorted(ga) == sorted(pa) == list(range(N_CLIENTS))
    runs = client.search_runs([experiment.experiment_id],
                              f"tags.root_run_id = '{second.mlflow_run_id}'", max_results=5000)
    (run,) = [r for r in runs if r.info.run_name == "fedavg_ft"]
    (row,) = [r for r in client_table(client, run.info.run_id) if r["client"] == 3]
    assert row["best.global.test_accuracy"] == pytest.approx(ga[3])
    # it logs its GA in the vocabulary of its PA, prefixed global.
    scores = ("val_loss", "val_accuracy", "test_loss", "test_accuracy")
    history = client_history(client, run.info.run_id, 3, "global.val_accuracy")
    names = set(row) | set(client_table(client, run.info.run_id, CLIENT_HISTORY_TABLE)[0])
    assert {f"global.{m}" for m in scores} | {f"{s}.global.{m}" for s in ("best", "last")
                                              for m in scores} <= names
    assert len(history) == ADDED["epochs"] + 1   # rounds 0, 1, 2
    report = json.loads((results / "latest" / "report" / "report.json").read_text())
    comparisons = report["splits"]["test"]["generalization"]
    share = 100 * sum(pa[c] > ga[c] for c in pa) / N_CLIENTS
    assert comparisons["fedavg_ft"]["beats_global"] == pytest.approx(share)
    assert comparisons["fedavg_ft"]["GA"] == pytest.approx(sum(ga.values()) / N_CLIENTS)
    for model in ("local", "fedper"):   # PA only: no global model
        assert comparisons[model]["GA"] is None and comparisons[model]["PA"] is not None


def test_persfl_client_rows_carry_teacher_lambda_t_and_per_epoch_curves(server_runs):
    client, _, _, runs = server_runs
    (run,) = [r for r in runs if r.info.run_name == "persfl"]
    distilled = client_table(client, run.info.run_id)
    assert len(distilled) == N_CLIENTS
    for row in distilled:
        assert 1 <= int(row["teacher_round"]) <= 40
        assert 0 <= float(row["lam"]) <= 1
        assert float(row["temperature"]) > 0
    history = client_history(client, run.info.run_id, 0, "val_accuracy")
    assert [r for r, _ in history] == list(range(11))  # the teacher, then 10 epochs


def test_client_models_are_one_file_of_their_algorithms_run(server_runs, quickstart, tmp_path,
                                                              mlflow_server, monkeypatch):
    import mlflow.pytorch
    import torch

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # where models:/ URIs resolve
    client, _, _, runs = server_runs
    results, *_ = quickstart
    (run,) = [r for r in runs if r.info.run_name == "fedper"]
    path = client.download_artifacts(run.info.run_id, "models/clients.pt", str(tmp_path))

    logged = torch.load(path, weights_only=True)

    first_run = sorted((results / "runs").iterdir())[0]
    assert sorted(logged) == [f"client_{c:04d}" for c in range(N_CLIENTS)]
    saved = torch.load(first_run / "seed-0" / "fedper" / "models" / "client_0003.pt",
                       weights_only=True)
    assert all(torch.equal(logged["client_0003"][k], v) for k, v in saved.items())
    # fedavg's best global model is an MLflow model of its run
    (fedavg,) = [r for r in runs if r.info.run_name == "fedavg"]
    (output,) = fedavg.outputs.model_outputs
    model = mlflow.pytorch.load_model(f"models:/{output.model_id}", dst_path=str(tmp_path))
    best = torch.load(first_run / "seed-0" / "fedavg" / "models" / "global_best_val.pt",
                      weights_only=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in best.items())


STAGE = re.compile(r"^\s+([✓↺✗])\s+(\S.*?)(?:\s{2,}|$)")
#: A sqlite store's `mlflow ui` line: shown for the default store, not for a tracking server.
SQLITE_ONLY = "mlflow ui --backend-store-uri sqlite:"


def stages(output: str) -> list[tuple[str, str]]:
    """The stage lines of `pflpipe run`'s output: (✓ ran | ↺ cached | ✗ failed, the stage)."""
    return [m.groups() for line in output.splitlines() if (m := STAGE.match(line))]


def shape(output: str) -> list[str]:
    """Each line's indentation and first two words, ids and numbers blanked, a stage's name too.

    What a rerun changes (times, run ids, folders' timestamps, scores, the closing lines'
    wording past their start, the order in which stages that run at once finish) leaves it as it
    is; a line added, dropped or reordered does not. Text wrapped at 160 characters counts as
    its first line: a stage's note continues 6 spaces in, and the closing answer is the last
    paragraph.
    """
    lines, last = [], None
    body, _, closing = output.strip("\n").rpartition("\n\n")
    for line in [*body.splitlines(), "", closing.splitlines()[0]]:
        if line.strip().startswith(SQLITE_ONLY):
            continue
        if last and STAGE.match(last) and line.startswith(" " * 6) and line.strip():
            continue   # the stage's wrapped note
        last = line if STAGE.match(line) else (last if line.startswith(" " * 6) else None)
        if found := STAGE.match(line):
            lines.append(f"  {found.group(1)} STAGE")
            continue
        words = re.sub(r"\d+(\.\d+)?", "N", re.sub(r"\b[0-9a-f]{8,}\b", "ID", line)).split()
        lines.append(" " * (len(line) - len(line.lstrip())) + " ".join(words[:2]))
    return lines


def test_readme_output_check_ignores_times_and_ids_but_not_a_stage():
    shown = _readme_block("quickstart-output")
    assert max(map(len, shown.splitlines())) <= 160  # the CLI wraps longer lines
    rerun = re.sub(r"\d+\.\d s", "3.1 s", shown).replace("5f4b8810", "0a1b2c3d")
    assert stages(rerun) == stages(shown) and shape(rerun) == shape(shown)
    assert ("✓", "personalize[fedper] · seed 0") in stages(shown) and len(stages(shown)) == 8
    dropped = "\n".join(x for x in shown.splitlines() if "train_local" not in x)
    assert stages(dropped) != stages(shown) and shape(dropped) != shape(shown)
    lines = shown.splitlines()  # two stages that ran at once, finished the other way round
    first, second = (i for i, x in enumerate(lines) if "train_local" in x or "select_t" in x)
    lines[first], lines[second] = lines[second], lines[first]
    swapped = "\n".join(lines)
    assert sorted(stages(swapped)) == sorted(stages(shown)) and shape(swapped) == shape(shown)
    cached = shown.replace("✓ train_local", "↺ train_local")
    assert sorted(stages(cached)) != sorted(stages(shown)) and shape(cached) != shape(shown)
    extra = shown.replace("\ndone in", "\n  a new line\ndone in")
    assert shape(extra) != shape(shown)


def test_readme_shows_the_run_as_it_is(quickstart):
    """The README's example output: a fresh run's stages, and its lines' shape.

    kfp.local runs the quickstart's tasks one at a time and prints a stage when it ends; stages
    that do not wait for each other (train_local and the chain) may come in either order; the
    chain's ends are fixed.
    """
    _, first, _, _ = quickstart
    shown = _readme_block("quickstart-output")
    assert sorted(stages(shown)) == sorted(stages(first.stdout))
    ends = [stages(first.stdout)[0], *stages(first.stdout)[-2:]]
    assert [stages(shown)[0], *stages(shown)[-2:]] == ends == [
        ("✓", "partition_data · seed 0"), ("✓", "collect_results · seed 0"),
        ("✓", "evaluate_fairness")]
    assert shape(shown) == shape(first.stdout), first.stdout


def test_readme_quickstart_command_runs_this_spec():
    """The README's first command is the run these tests make (after installing the project)."""
    command = _readme_block("quickstart-command")
    assert command.endswith(f"pflpipe run specs/{QUICKSTART.name}")
    assert " install . " in command  # non-editable: what a user gets


# --- the MLflow UI in a real browser ------------------------------------------------------------

#: Where the browser test leaves its screenshot (a CI artifact); PFLPIPE_TEST_ARTIFACTS moves it.
ARTIFACTS = Path(os.environ.get("PFLPIPE_TEST_ARTIFACTS", REPO / "test-artifacts"))
NAME_CELL = "[col-id='attributes.`Run Name`']"
EXPAND = "button[data-component-id$='runnamecellrenderer.tsx_46']"


def test_mlflow_ui_lists_the_parent_and_its_algorithm_runs_with_metrics(quickstart, browser):
    """Open the link `pflpipe run` printed; expand the parent; show the algorithms' metrics."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    _, first, _, _ = quickstart
    (url,) = [w for w in first.stdout.split() if "workflowType=machine_learning" in w]
    wait = WebDriverWait(browser, 90)

    def names() -> list[str]:
        return [e.text for e in browser.find_elements(By.CSS_SELECTOR, f"{NAME_CELL} a span")]

    def expand(name: str) -> None:
        cell = next(c for c in browser.find_elements(By.CSS_SELECTOR, NAME_CELL)
                    if [e.text for e in c.find_elements(By.CSS_SELECTOR, "a span")] == [name])
        cell.find_element(By.CSS_SELECTOR, EXPAND).click()

    browser.get(url)
    first, latest = ("persfl-digits · fedavg+persfl+fedper · seed 0",
                     "persfl-digits · fedavg+persfl+fedper+fedavg_ft · seed 0")
    wait.until(lambda _: {first, latest} <= set(names()))
    expand(latest)
    algorithms = ["fedavg", "local", "persfl", "fedper", "fedavg_ft"]
    wait.until(lambda _: set(algorithms) <= set(names()))
    # fedavg's best global model is in the Models column (the clients' are in one artifact)
    models = "[col-id='attributes.`Models`']"
    wait.until(lambda _: _column(browser, By, f"{NAME_CELL} a span", models).get("fedavg", "")
               == "fedavg-global")

    _show_column(browser, wait, "best.test_accuracy", By, Keys)
    cells = "[col-id='metrics.`best.test_accuracy`']"
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, f".ag-row {cells}")) > 1)
    shown = _column(browser, By, f"{NAME_CELL} a span", cells)
    for algorithm in algorithms:   # the mean over its clients
        assert 0.5 <= float(shown[algorithm]) <= 1.0, (algorithm, shown.get(algorithm))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "mlflow-runs.png"))


def _column(browser, By, name_cell: str, value_cell: str) -> dict[str, str]:
    """Run name → the text of one column, joining ag-grid's pinned and scrolled halves of rows."""
    def by_row(container: str, selector: str) -> dict[str, str]:
        rows = browser.find_elements(By.CSS_SELECTOR, f"{container} .ag-row")
        return {row.get_attribute("row-index"): " ".join(
            e.text for e in row.find_elements(By.CSS_SELECTOR, selector)) for row in rows}

    names = by_row(".ag-pinned-left-cols-container", name_cell)
    values = by_row(".ag-center-cols-container", value_cell)
    return {names[i]: values.get(i, "") for i in names}


def _show_column(browser, wait, metric: str, By, Keys) -> None:
    """Tick a metric in the runs table's Columns menu (metric columns are hidden at first)."""
    next(b for b in browser.find_elements(By.CSS_SELECTOR, "button")
         if b.text.strip() == "Columns").click()
    search = wait.until(lambda b: b.find_element(By.CSS_SELECTOR,
                                                 "input[placeholder='Search columns']"))
    search.send_keys(metric)
    node = wait.until(lambda b: next(
        (n for n in b.find_elements(By.CSS_SELECTOR, ".du-bois-light-tree-treenode")
         if n.text.strip() == metric), None))
    node.find_element(By.CSS_SELECTOR, ".du-bois-light-tree-checkbox").click()
    search.send_keys(Keys.ESCAPE)
