"""Every component: its `python_func` on tiny real artifacts (digits, 4 clients, a few rounds),
chained as the pipeline chains them, and every component compiled on its own.

The chain tracks into an MLflow sqlite file of the test; the parent run is opened as the CLI does.
"""

import json
from pathlib import Path

import mlflow
import pytest
import yaml
from kfp import compiler, dsl

from pflpipe.components._image import PFLPIPE_IMAGE
from pflpipe.components.collect_results import collect_results
from pflpipe.components.distill_grid_search import distill_grid_search
from pflpipe.components.evaluate_fairness import evaluate_fairness
from pflpipe.components.partition_data import partition_data
from pflpipe.components.personalize import personalize
from pflpipe.components.select_teachers import select_teachers
from pflpipe.components.train_local import train_local
from pflpipe.components.warm_start_fedavg import warm_start_fedavg
from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.spec import Spec, parse_spec
from pflpipe.tracking import open_parent_run

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = [partition_data, warm_start_fedavg, train_local, personalize, select_teachers,
              distill_grid_search, collect_results, evaluate_fairness]
N_CLIENTS = 4

TINY = """\
experiment: {{name: tiny, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 3}}
personalization:
  - {{name: persfl}}
  - {{name: fedper, rounds: 2}}
  - {{name: local, epochs: 2}}
distillation: {{epochs: 1, lambdas: [0.0, 0.5], temperatures: [1.0, 5.0]}}
tracking: {{uri: "sqlite:///{out}/mlflow.db"}}
"""


def artifact(kind, tmp: Path, name: str):
    return kind(name=name, uri=str(tmp / name))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Run every component's python_func in pipeline order; return the artifacts by name."""
    tmp = tmp_path_factory.mktemp("chain")
    spec = parse_spec(TINY.format(out=tmp))
    parent = open_parent_run(spec)
    track = parent.pipeline_parameters()
    a = {name: artifact(kind, tmp, name) for name, kind in [
        ("partition", dsl.Dataset), ("checkpoints", dsl.Model), ("fedavg", dsl.Model),
        ("local", dsl.Model), ("fedper", dsl.Model), ("teachers", dsl.Dataset),
        ("persfl", dsl.Model), ("seed0", dsl.Model), ("metrics", dsl.Metrics),
        ("report", dsl.Artifact), ("html", dsl.HTML)]}
    md = {name: artifact(dsl.Markdown, tmp, f"{name}.md") for name in
          ("partition", "warm", "local", "fedper", "teachers", "persfl", "seed0", "report")}
    full = spec.model_dump_json(by_alias=True)
    partition_data.python_func(spec_json=scoped_spec_json(spec, "partition_data"), seed=0,
                               partition=a["partition"], summary=md["partition"])
    warm_start_fedavg.python_func(spec_json=scoped_spec_json(spec, "warm_start_fedavg"), seed=0,
                                  partition=a["partition"], checkpoints=a["checkpoints"],
                                  results=a["fedavg"], summary=md["warm"])
    train_local.python_func(spec_json=full, seed=0, partition=a["partition"],
                            results=a["local"], summary=md["local"], **track)
    personalize.python_func(spec_json=full, seed=0, label="fedper", partition=a["partition"],
                            checkpoints=a["checkpoints"], results=a["fedper"],
                            summary=md["fedper"], **track)
    select_teachers.python_func(spec_json=full, seed=0, checkpoints=a["checkpoints"],
                                teachers=a["teachers"], summary=md["teachers"], **track)
    distill_grid_search.python_func(spec_json=full, seed=0, partition=a["partition"],
                                    checkpoints=a["checkpoints"], teachers=a["teachers"],
                                    results=a["persfl"], summary=md["persfl"], **track)
    collect_results.python_func(spec_json=full, seed=0, fedavg=a["fedavg"], local=a["local"],
                                persfl=a["persfl"], personalized=[a["fedper"]],
                                results=a["seed0"], metrics=a["metrics"], summary=md["seed0"],
                                **track)
    evaluate_fairness.python_func(spec_json=full, results=[a["seed0"]], report=a["report"],
                                  html=a["html"], summary=md["report"], **track)
    parent.finish()
    return {"spec": spec, "parent": parent, "md": md,
            **{name: Path(x.path) for name, x in a.items()}, "metrics_artifact": a["metrics"]}


def test_partition_data_writes_a_partition_of_every_client(chain):
    manifest = json.loads((chain["partition"] / "manifest.json").read_text())
    assert manifest["n_clients"] == N_CLIENTS and manifest["seed"] == 0
    assert len(list((chain["partition"] / "clients").glob("client_*.pt"))) == N_CLIENTS
    summary = Path(chain["md"]["partition"].path).read_text()
    assert summary.startswith("**partition_data**: digits, ds1, 4 clients, seed 0")
    assert summary.count("\n| ") == 1 + N_CLIENTS  # the header and a row per client


def test_warm_start_keeps_every_round(chain):
    rounds = sorted(p.name for p in chain["checkpoints"].glob("round_*.pt"))
    assert rounds == [f"round_{r:04d}.pt" for r in range(4)]
    assert (chain["checkpoints"] / "round_metrics.csv").is_file()
    assert (chain["fedavg"] / "results.csv").is_file()


@pytest.mark.parametrize("name", ["local", "fedper", "persfl"])
def test_training_components_write_a_results_directory_with_client_models(chain, name):
    models = sorted(p.name for p in (chain[name] / "models").glob("client_*.pt"))
    assert models == [f"client_{c:04d}.pt" for c in range(N_CLIENTS)]
    assert Path(chain["md"][name].path).read_text().strip()


def test_select_teachers_chooses_a_round_per_client(chain):
    teachers = json.loads((chain["teachers"] / "teachers.json").read_text())["teachers"]
    assert [t["client"] for t in teachers] == list(range(N_CLIENTS))
    assert all(1 <= t["round"] <= 3 for t in teachers)


def test_collect_results_gathers_every_model_of_the_seed(chain):
    collected = json.loads((chain["seed0"] / "collected.json").read_text())
    assert collected == {"seed": 0, "models": ["fedavg", "local", "persfl", "fedper"]}
    rows = (chain["seed0"] / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 2 * 2 * N_CLIENTS  # models × splits × selections × clients
    assert set(chain["metrics_artifact"].metadata) == {
        "fedavg.test_accuracy", "local.test_accuracy", "persfl.test_accuracy",
        "fedper.test_accuracy"}
    assert all(0 <= v <= 1 for v in chain["metrics_artifact"].metadata.values())


def test_evaluate_fairness_writes_the_report_and_an_html_artifact(chain):
    assert {p.name for p in chain["report"].iterdir()} >= {"report.json", "report.md",
                                                          "report.html", "figures"}
    assert chain["html"].read_bytes() == (chain["report"] / "report.html").read_bytes()
    assert json.loads((chain["report"] / "report.json").read_text())["best"]


def test_tracked_components_open_child_runs_under_the_parent(chain):
    client = mlflow.MlflowClient(chain["parent"].tracking_uri)
    runs = client.search_runs([chain["parent"].experiment_id],
                              f"tags.mlflow.parentRunId = '{chain['parent'].run_id}'")
    assert {r.data.tags["stage"] for r in runs} == {
        "warm_start_fedavg", "train_local", "personalize", "select_teachers",
        "distill_grid_search"}
    parent = client.get_run(chain["parent"].run_id)
    assert any(key.startswith("fedper.test.") for key in parent.data.metrics)
    assert parent.data.tags["partition_hash.seed-0"] == json.loads(
        (chain["partition"] / "manifest.json").read_text())["content_hash"]


def test_collect_results_logs_the_cached_warm_start_with_round_histories(chain):
    """The warm start takes no run id (it is cached); collect_results logs it per run."""
    client = mlflow.MlflowClient(chain["parent"].tracking_uri)
    (warm,) = client.search_runs([chain["parent"].experiment_id],
                                 f"tags.mlflow.parentRunId = '{chain['parent'].run_id}' and "
                                 "tags.stage = 'warm_start_fedavg'")
    assert warm.data.params["rounds"] == "3" and warm.data.metrics["rounds_completed"] == 3
    clients = client.search_runs([chain["parent"].experiment_id],
                                 f"tags.mlflow.parentRunId = '{warm.info.run_id}'")
    assert sorted(int(r.data.tags["client_id"]) for r in clients) == list(range(N_CLIENTS))
    history = client.get_metric_history(clients[0].info.run_id, "val_accuracy")
    assert sorted(m.step for m in history) == [0, 1, 2, 3]


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_component_compiles_alone_on_the_project_image_without_pip(component, tmp_path):
    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(component, str(path))
    ir = yaml.safe_load(path.read_text())
    (executor,) = ir["deploymentSpec"]["executors"].values()
    container = executor["container"]
    assert container["image"] == PFLPIPE_IMAGE
    assert "pip install" not in " ".join(container["command"])


def test_default_image_is_the_specs_default():
    assert PFLPIPE_IMAGE == Spec.model_fields["resources"].default_factory().image


@pytest.mark.parametrize("path", sorted((REPO / "components").glob("[!_]*.py")),
                         ids=lambda p: p.stem)
def test_component_module_is_a_thin_shim(path):
    assert len(path.read_text().splitlines()) <= 40
