"""`pflpipe split --export flower|pfllib`: the reproduction package trains, without pflpipe and
without Flower, to pflpipe's own per-client FedAvg accuracies, exactly (issue 32)."""

import contextlib
import importlib
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pflpipe.cli import main
from pflpipe.engine.data import member_seed, schedule
from pflpipe.engine.tree import weighted_mean
from pflpipe.spec import read_spec
from pflpipe.stages import warm_start_fedavg
from pflpipe.training import csv_tables

SPEC = """\
experiment: {{name: repro, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds2, n_clients: 4, alpha: 0.5, fractions: {{train: 0.75, test: 0.25}}}}
federation: {{rounds: 3, batch_size: 20{extra}}}
personalization: []
tracking: {{enabled: false}}
"""

#: Runs the exported logic in a fresh interpreter where importing pflpipe or flwr fails.
ISOLATED = textwrap.dedent("""\
    import json, sys
    sys.modules["pflpipe"] = None   # an import of either raises ImportError
    sys.modules["flwr"] = None
    sys.path.insert(0, sys.argv[1])
    from pflpipe_fedavg import task
    print(json.dumps(task.run_in_process(sys.argv[1])))
""")


def write_spec(tmp_path, extra: str = ""):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(out=tmp_path / "results", extra=extra))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 4-client digits split exported for Flower, and pflpipe's own warm start on it."""
    tmp_path = tmp_path_factory.mktemp("repro")
    spec_path = write_spec(tmp_path, ", momentum: 0.5")
    assert main(["split", str(spec_path), "-o", str(tmp_path / "partition"),
                 "--export", "flower", str(tmp_path / "flower")]) == 0
    warm_start_fedavg.run(read_spec(spec_path), 0, tmp_path / "partition", tmp_path / "ck",
                          tmp_path / "fedavg")
    return tmp_path


@contextlib.contextmanager
def imported_task(folder, monkeypatch):
    """The `pflpipe_fedavg.task` module of the export in `folder`, forgotten afterwards."""
    monkeypatch.syspath_prepend(str(folder))
    for name in [n for n in sys.modules if n.startswith("pflpipe_fedavg")]:
        monkeypatch.delitem(sys.modules, name)
    yield importlib.import_module("pflpipe_fedavg.task")
    for name in [n for n in sys.modules if n.startswith("pflpipe_fedavg")]:
        del sys.modules[name]


def export_and_warm_start(tmp_path, spec_path) -> None:
    """Export the spec's split to tmp_path/flower, and run pflpipe's warm start into tmp_path/r."""
    assert main(["split", str(spec_path), "-o", str(tmp_path / "p"),
                 "--export", "flower", str(tmp_path / "flower")]) == 0
    warm_start_fedavg.run(read_spec(spec_path), 0, tmp_path / "p", tmp_path / "ck",
                          tmp_path / "r")


def warm_start_test_accuracies(tmp_path) -> dict:
    """pflpipe's per-(round, client) test accuracies of `export_and_warm_start`'s run."""
    history = csv_tables.read_csv(tmp_path / "r" / "history.csv")
    return {(int(r["round"]), int(r["client"])): float(r["accuracy"]) for r in history
            if r["split"] == "test"}


@pytest.fixture
def task(exported, monkeypatch):
    """The exported `pflpipe_fedavg.task` module, imported from the export."""
    with imported_task(exported / "flower", monkeypatch) as module:
        yield module


def test_exported_app_logic_reproduces_pflpipe_per_client_accuracies_exactly(exported):
    done = subprocess.run([sys.executable, "-c", ISOLATED, str(exported / "flower")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    history = csv_tables.read_csv(exported / "fedavg" / "history.csv")
    pflpipe = {(int(r["round"]), int(r["client"])): float(r["accuracy"]) for r in history
               if r["split"] == "test"}

    flower = {(r["round"], r["client"]): r["accuracy"] for r in rows}
    assert len(pflpipe) == 4 * 4    # rounds 0..3 × 4 clients
    assert flower == pflpipe        # every client, every round, to the bit
    assert len(set(pflpipe.values())) > 4   # the accuracies differ: a real comparison


def test_initial_weights_are_the_warm_starts_round_zero(exported, task):
    round_zero = torch.load(exported / "ck" / "round_0000.pt", weights_only=True)
    package = task.Package.load(exported / "flower")

    initial = package.initial_weights()
    assert list(initial) == ["base.1.weight", "base.1.bias", "head.weight", "head.bias"]
    assert all(torch.equal(initial[key], round_zero[key]) for key in round_zero)
    assert package.settings["model"]["state_dict"] == {
        "base.1.weight": [100, 64], "base.1.bias": [100], "head.weight": [10, 100],
        "head.bias": [10]}
    assert package.model().state_dict().keys() == round_zero.keys()


def test_settings_name_every_training_setting(exported, task):
    settings = task.Package.load(exported / "flower").settings

    assert {k: settings[k] for k in ("rounds", "local_epochs", "batch_size", "lr", "seed",
                                     "client_fraction")} == {
        "rounds": 3, "local_epochs": 1, "batch_size": 20, "lr": 0.05, "seed": 0,
        "client_fraction": 1.0}
    assert settings["optimizer"]["name"] == "sgd" and settings["optimizer"]["momentum"] == 0.5
    assert "n_k / n" in settings["weighting"] and "randperm" in settings["batch_order"]


@pytest.mark.parametrize(("n", "batch", "epochs", "seed"),
                         [(47, 20, 2, 3), (20, 20, 3, 1), (7, 20, 1, 5), (41, 4, 1, 9)])
def test_exported_batch_order_is_the_engines_schedule(task, n, batch, epochs, seed):
    steps = -(-n // batch) * epochs
    engine = schedule(n, steps, batch, seed)[:, 0]   # [steps, B], -1 padded

    exported = task.batch_order(n, batch, epochs, seed)
    assert len(exported) == steps
    for step, ids in enumerate(exported):
        assert ids.tolist() == [i for i in engine[step].tolist() if i >= 0]
    assert task.member_seed(0, 0, 3, 2, 0) == member_seed(0, 0, 3, 2, 0)


def test_exported_aggregate_is_the_engines_weighted_mean(task):
    generator = torch.Generator().manual_seed(0)
    weights = [{"w": torch.randn(3, 4, generator=generator)} for _ in range(3)]
    counts = torch.tensor([5, 17, 2])

    mean = task.aggregate([(2, weights[2], 2), (0, weights[0], 5), (1, weights[1], 17)])
    stacked = {"w": torch.stack([w["w"] for w in weights])}
    assert torch.equal(mean["w"], weighted_mean(stacked, counts.float() / counts.sum())["w"])


def test_sampled_clients_are_the_engines(tmp_path, task):
    from pflpipe.algorithms import FedAvg
    from pflpipe.engine.federation import Federation, Plan

    package = task.Package(tmp_path, {"client_fraction": 0.3, "seed": 4,
                                      "partition": {"num_partitions": 10}})
    plan = Plan(rounds=5, local_epochs=1, batch_size=5, lr=0.1, seed=4, client_fraction=0.3)
    federation = Federation.__new__(Federation)   # only its sampling rule is used
    federation.plan, federation.n_clients = plan, 10
    federation.all_clients = torch.arange(10)

    for round_idx in range(1, 6):
        assert task.sampled_clients(package, round_idx) == \
            federation._sample(round_idx).tolist()
    assert FedAvg   # the warm start's algorithm samples through the same Federation


def test_pfllib_export_has_the_package_and_the_main_py_command(tmp_path, capsys):
    spec = write_spec(tmp_path)

    assert main(["split", str(spec), "--export", "pfllib", str(tmp_path / "pfllib")]) == 0

    readme = (tmp_path / "pfllib" / "README.md").read_text()
    arguments = ("-data pflpipe-repro -m DNN -algo FedAvg -gr 3 -ls 1 -lbs 20 -lr 0.05 -nc 4 "
                 "-ncl 10 -jr 1 -eg 1 -t 1 -dev cpu")
    assert f"python main.py {arguments}" in readme
    assert f"python pfllib_run.py PATH/TO/PFLlib {arguments}" in readme
    assert "fc(log_softmax(relu(fc1(x))))" in readme and "`base.fc1.*`" in readme
    assert (tmp_path / "pfllib" / "pfllib_run.py").is_file()
    assert (tmp_path / "pfllib" / "pflpipe_fedavg" / "task.py").is_file()
    assert (tmp_path / "pfllib" / "initial_weights.pt").is_file()
    assert (tmp_path / "pfllib" / "reproduce.json").is_file()
    assert not (tmp_path / "pfllib" / "val").exists()   # no validation split, no val/ folder
    assert np.load(tmp_path / "pfllib" / "train" / "0.npz", allow_pickle=True)["data"].item()[
        "x"].dtype == np.float32


TINY = '''\
from torch import nn


class Tiny(nn.Module):
    head_prefixes = ("fc.",)

    def __init__(self, in_shape, n_classes):
        super().__init__()
        self.flat = nn.Flatten()
        self.fc = nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], n_classes)

    def forward(self, x):
        return self.fc(self.flat(x))
'''


def test_custom_model_is_exported_as_torchscript_and_reproduces(tmp_path, monkeypatch):
    (tmp_path / "tinynet_export.py").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.format(out=tmp_path / "results", extra="").replace(
        "n_clients: 4", "n_clients: 3").replace("rounds: 3", "rounds: 2")
        + "model: {architecture: custom, path: 'tinynet_export:Tiny'}\n")
    export_and_warm_start(tmp_path, spec_path)
    with imported_task(tmp_path / "flower", monkeypatch) as task:
        rows = task.run_in_process(tmp_path / "flower")

    assert (tmp_path / "flower" / "model_script.pt").is_file()
    assert ({(r["round"], r["client"]): r["accuracy"] for r in rows}
            == warm_start_test_accuracies(tmp_path))


def test_partial_participation_and_adam_reproduce_exactly(tmp_path, monkeypatch):
    spec_path = write_spec(tmp_path, ", client_fraction: 0.5, optimizer: adam, lr: 0.01")
    export_and_warm_start(tmp_path, spec_path)
    with imported_task(tmp_path / "flower", monkeypatch) as task:
        rows = task.run_in_process(tmp_path / "flower")
        sampled = [task.sampled_clients(task.Package.load(tmp_path / "flower"), r)
                   for r in (1, 2, 3)]

    assert all(len(clients) == 2 for clients in sampled)   # half of the 4 clients train
    assert ({(r["round"], r["client"]): r["accuracy"] for r in rows}
            == warm_start_test_accuracies(tmp_path))
