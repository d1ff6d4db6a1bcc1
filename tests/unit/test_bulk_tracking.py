"""A model's clients are logged in bulk, into a real sqlite MLflow store: one run per model
whatever the number of clients, each client a row of its tables, every client's model in one file
(issue 50: a run per client per model was 4,005 runs at 1,000 clients)."""

import pytest
import torch
from client_tables import client_table
from mlflow import MlflowClient

from pflpipe.spec import parse_spec
from pflpipe.tracking import child_run, open_parent_run, vocabulary
from pflpipe.tracking.client_tables import log_clients
from pflpipe.training.results_files import client_models

SPEC = """\
experiment: {name: bulk-tracking}
dataset: {name: digits}
partition: {strategy: iid, n_clients: 2}
"""


def _rows(n_clients: int) -> tuple[list[dict], list[dict]]:
    """Client c: val accuracy c/100 in round 1 and c/50 in round 2, test accuracy c/40 (best)."""
    results = [{"client": c, "selection": "best_val", "split": "test", "round": 2,
                "accuracy": c / 40, "loss": 1.0, "steps": 3} for c in range(n_clients)]
    history = [{"client": c, "round": r, "split": "val", "accuracy": c * r / 100, "loss": 2.0}
               for c in range(n_clients) for r in (1, 2)]
    return results, history


def _log(n_clients: int, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = parse_spec(SPEC)
    parent = open_parent_run(spec, seed=0, spec_yaml=SPEC)
    stacked = {"w": torch.arange(n_clients * 6.0).reshape(n_clients, 2, 3)}
    results, history = _rows(n_clients)
    with child_run(spec.tracking, parent.tracking_uri, parent.experiment, parent.run_id,
                   "personalize") as stage, stage.child("fedper", {"algorithm": "fedper"}) as run:
        log_clients(run, results, history, lambda c: {"teacher_round": c % 2},
                    client_models(stacked))
    parent.finish()
    return MlflowClient(parent.tracking_uri), parent


@pytest.mark.parametrize("n_clients", [3, 30])
def test_log_clients_makes_one_run_holding_every_clients_values(n_clients, tmp_path,
                                                                monkeypatch):
    client, parent = _log(n_clients, tmp_path, monkeypatch)
    runs = client.search_runs([parent.experiment_id])
    assert len(runs) == 3  # the parent, the stage, the model
    [run] = [r for r in runs if r.info.run_name == "fedper"]
    mean_val = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                      "val_accuracy")]
    # the mean of c·r/100 over c = 0..n−1 is (n−1)·r/200
    assert mean_val == [(1, pytest.approx((n_clients - 1) / 200)),
                        (2, pytest.approx((n_clients - 1) / 100))]
    assert run.data.metrics["best.test_accuracy"] == pytest.approx((n_clients - 1) / 80)
    assert run.data.metrics["compute.all_clients.steps"] == 3 * n_clients

    final = client_table(client, run.info.run_id)
    assert [row["client"] for row in final] == list(range(n_clients))
    assert final[-1]["best.test_accuracy"] == pytest.approx((n_clients - 1) / 40)
    assert final[-1]["teacher_round"] == (n_clients - 1) % 2
    history = client_table(client, run.info.run_id, vocabulary.CLIENT_HISTORY_TABLE)
    assert len(history) == 2 * n_clients
    assert history[-1] == {"client": n_clients - 1, "round": 2,
                           "val_loss": 2.0, "val_accuracy": pytest.approx((n_clients - 1) / 50)}

    path = client.download_artifacts(run.info.run_id, f"models/{vocabulary.CLIENT_MODELS}.pt",
                                     str(tmp_path))
    models = torch.load(path, weights_only=True)
    assert sorted(models) == [f"client_{c:04d}" for c in range(n_clients)]
    last = models[f"client_{n_clients - 1:04d}"]["w"]
    assert torch.equal(last, torch.arange(6.0).reshape(2, 3) + 6 * (n_clients - 1))
    assert last.untyped_storage().nbytes() == last.nbytes  # its own weights only



def test_a_local_artifact_store_links_logged_files_instead_of_copying_them(tmp_path, monkeypatch):
    # Prepare: a report folder, and a parent run in a sqlite store with local artifacts
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    (report / "report.md").write_text("# report\n")
    (report / "figures" / "a.png").write_bytes(b"\x89PNG 1")
    parent = open_parent_run(parse_spec(SPEC), seed=0, spec_yaml=SPEC)

    # Execute: a file and a folder logged
    tracker = parent.tracker()
    tracker.log_artifact(report / "report.md", "report")
    tracker.log_artifact(report / "figures", "report/figures")
    parent.finish()

    # Assert: the run's artifacts are the same files (one copy on disk), read back as logged
    client = MlflowClient(parent.tracking_uri)
    for name in ("report.md", "figures/a.png"):
        path = client.download_artifacts(parent.run_id, f"report/{name}", str(tmp_path / "dl"))
        assert open(path, "rb").read() == (report / name).read_bytes()
    root = client.get_run(parent.run_id).info.artifact_uri.removeprefix("file://")
    for name in ("report.md", "figures/a.png"):
        assert (report / name).samefile(f"{root}/report/{name}")
