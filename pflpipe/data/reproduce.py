"""The reproduction package of a `flower` or `pfllib` export.

It is what another tool needs to train pflpipe's FedAvg warm start to the same per-client numbers:

- `reproduce.json`: the training settings (rounds, local epochs, batch size, optimizer, learning
  rate, client fraction, server optimizer, weighting), the batch-order rule, the model (its
  architecture, input shape and state-dict keys with shapes) and the partition's provenance;
- `initial_weights.pt`: the round-0 global state_dict (`torch.load(..., weights_only=True)`). It
  is the model's deterministic initialisation for the seed (`pflpipe.models.build_model`), the
  very weights the warm start begins from (its `round_0000.pt`): no training is needed;
- `pflpipe_fedavg/model.py`: the network as code (the built-in zoo's source and a `build`), or,
  for a custom `model.path`, a TorchScript module (`model_script.pt`) that `build` loads;
- flower: the app (`pflpipe_fedavg/`: `task.py` holds the training and aggregation with no Flower
  import, `client_app.py` and `server_app.py` wrap it) and its `pyproject.toml`;
- pfllib: `README.md` with the `main.py` command and what PFLlib does differently.
"""

import inspect
import json
import shutil
from pathlib import Path

import torch

from pflpipe.errors import DataError
from pflpipe.layout import (
    APP_OUTPUTS,
    INITIAL_WEIGHTS_PT,
    MODEL_SCRIPT_PT,
    PYPROJECT_TOML,
    README_MD,
    REPRODUCE_JSON,
)

APP = "pflpipe_fedavg"
SETTINGS, INITIAL_WEIGHTS, SCRIPTED = REPRODUCE_JSON, INITIAL_WEIGHTS_PT, MODEL_SCRIPT_PT
#: What the exported Flower app and PFLlib runner write (`flower_app/`).
FLOWER_HISTORY, PFLLIB_HISTORY = APP_OUTPUTS
TEMPLATES = Path(__file__).parent / "flower_app"
BATCH_ORDER = (
    "client k in round r (1-based) trains on torch.Generator().manual_seed(member_seed(seed, 0, "
    "r, k, 0)), member_seed(*parts) = SeedSequence(parts).generate_state(2, uint64)[0] >> 1; each "
    "local epoch is torch.randperm(n, generator) of its n training samples cut into batches of "
    "batch_size in order, the last one short (one generator for all epochs of the round). A "
    "client with n <= batch_size takes all its samples in stored order every step.")
WEIGHTING = ("the new global model is sum_k (n_k / n) * w_k over the round's clients in client "
             "order (n_k: training samples), float32 weights, torch.tensordot")


def write(out_dir: Path, fmt: str, spec, seed: int, partition) -> list[Path]:
    """Write the reproduction package of `fmt` ("flower" or "pfllib") into `out_dir`.

    The package reproduces a classification (cross-entropy, accuracy); a regression has none
    (`pflpipe.data.export` writes its data alone).
    """
    if partition.task != "classification":
        raise DataError(f"{partition.manifest['dataset']['name']!r} is a regression; the "
                        "reproduction package covers classification only")
    from pflpipe.models import build_model

    n_outputs = partition.n_classes
    network = build_model(spec.model, partition.input_shape, n_outputs, seed)
    weights = {k: v.detach().clone() for k, v in network.state_dict().items()}
    torch.save(weights, out_dir / INITIAL_WEIGHTS)
    files = [out_dir / INITIAL_WEIGHTS, _json(out_dir / SETTINGS,
                                               settings(spec, seed, partition, weights))]
    app = out_dir / APP
    app.mkdir(exist_ok=True)
    files += _model_code(app, out_dir, spec, network, partition.input_shape, n_outputs)
    files += _copy(app, "task.py")   # the training logic: no Flower, no pflpipe
    files.append(_text(app / "__init__.py", '"""pflpipe\'s FedAvg warm start, no pflpipe."""\n'))
    if fmt == "pfllib":
        files += _copy(out_dir, "pfllib_run.py")
        files.append(_text(out_dir / README_MD, pfllib_readme(spec, seed, partition, weights)))
    else:
        files += _flower_app(out_dir, app, spec, partition)
    return files


def _copy(directory: Path, name: str) -> list[Path]:
    shutil.copyfile(TEMPLATES / name, directory / name)
    return [directory / name]


def settings(spec, seed: int, partition, weights: dict) -> dict:
    """What FedAvg's warm start does, as data (the content of `reproduce.json`)."""
    fed, server = spec.federation, spec.federation.server_optimizer
    notes = []
    if spec.engine.mode == "batched":
        notes.append("pflpipe trains clients batched (vmap); parameters equal a plain loop's up "
                     "to float rounding, accuracies matched exactly in our tests")
    if spec.engine.compile is True:
        notes.append("engine.compile: compiled steps round differently from a plain loop")
    if fed.early_stop:
        notes.append("federation.early_stop: pflpipe may stop before `rounds` (not reproduced)")
    return {
        "format": 1, "algorithm": "fedavg", "seed": seed, "rounds": fed.rounds,
        "local_epochs": fed.local_epochs, "batch_size": fed.batch_size, "lr": fed.lr,
        "optimizer": {"name": fed.optimizer, "momentum": fed.momentum,
                      "weight_decay": fed.weight_decay, "betas": [0.9, 0.999], "eps": 1e-8},
        "client_fraction": fed.client_fraction,
        "client_sampling": "clients sorted(numpy.random.default_rng([seed, 0, r, 7]).choice(C, "
                           "max(1, round(fraction * C)), replace=False)) when fraction < 1",
        "server_optimizer": {"name": server.name, "lr": server.server_lr, "beta1": server.beta1,
                             "beta2": server.beta2, "tau": server.tau},
        "weighting": WEIGHTING, "batch_order": BATCH_ORDER,
        "loss": "mean cross-entropy of the batch: sum of -log_softmax(output)[y] / batch size",
        "evaluation": "after round 0 and every round, the global model on every client's test "
                      "split: accuracy = correct / n",
        "model": {"architecture": spec.model.architecture,
                  "input_shape": list(partition.input_shape), "n_outputs":
                      partition.n_classes,
                  "state_dict": {key: list(value.shape) for key, value in weights.items()}},
        "partition": {"num_partitions": partition.n_clients, "task": partition.task,
                      "content_hash": partition.content_hash,
                      "dataset": partition.manifest["dataset"]["name"]},
        "notes": notes,
    }


def _model_code(app: Path, out_dir: Path, spec, network, in_shape, n_outputs) -> list[Path]:
    from pflpipe.models import builtin, zoo

    found = builtin(spec.model)
    if found is None:   # a custom model: TorchScript, loaded by build()
        try:
            torch.jit.script(network).save(str(out_dir / SCRIPTED))
        except Exception as err:  # noqa: BLE001 - scripting fails in many ways
            raise DataError(f"model.path: {spec.model.path!r} cannot be exported: TorchScript "
                            f"cannot compile it ({str(err).splitlines()[0]})") from err
        code = (f'"""The network: a TorchScript module ({SCRIPTED}) of pflpipe\'s model '
                f'{spec.model.path}."""\n\nfrom pathlib import Path\n\nimport torch\n\n\n'
                f'def build(root):\n    """The network, before its initial weights are '
                f'loaded."""\n    return torch.jit.load(str(Path(root) / "{SCRIPTED}"))\n')
        return [out_dir / SCRIPTED, _text(app / "model.py", code)]
    cls, kwargs = found
    arguments = ", ".join([repr(tuple(in_shape)), str(n_outputs),
                           *(f"{k}={v!r}" for k, v in kwargs.items())])
    code = (inspect.getsource(zoo) + f"\n\ndef build(root=None):\n    \"\"\"The network "
            f"(pflpipe's model.architecture {spec.model.architecture!r}), before its initial "
            f"weights are loaded.\"\"\"\n    return {cls.__name__}({arguments})\n")
    return [_text(app / "model.py", code)]


def _flower_app(out_dir: Path, app: Path, spec, partition) -> list[Path]:
    files = _copy(app, "client_app.py") + _copy(app, "server_app.py")
    files.append(_text(out_dir / PYPROJECT_TOML, PYPROJECT.format(
        name=spec.experiment.name, rounds=spec.federation.rounds,
        root=json.dumps(str(out_dir.resolve())), clients=partition.n_clients)))
    files.append(_text(out_dir / README_MD, FLOWER_README.format(
        clients=partition.n_clients, rounds=spec.federation.rounds, app=APP, settings=SETTINGS,
        weights=INITIAL_WEIGHTS, pyproject=PYPROJECT_TOML, history=FLOWER_HISTORY)))
    return files


PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "pflpipe-fedavg"
version = "1.0.0"
description = "pflpipe's FedAvg warm start of experiment {name!r} as a Flower app"
dependencies = ["flwr[simulation]>=1.20", "torch", "numpy"]

[tool.hatch.build.targets.wheel]
packages = ["pflpipe_fedavg"]

[tool.flwr.app]
publisher = "pflpipe"

[tool.flwr.app.components]
serverapp = "pflpipe_fedavg.server_app:app"
clientapp = "pflpipe_fedavg.client_app:app"

[tool.flwr.app.config]
num-server-rounds = {rounds}
package-dir = {root}

[tool.flwr.federations]
default = "local-simulation"

[tool.flwr.federations.local-simulation]
options.num-supernodes = {clients}
"""

FLOWER_README = """\
# pflpipe's FedAvg warm start as a Flower app

Reproduces pflpipe's per-client FedAvg test accuracies, round by round ({clients} clients,
{rounds} rounds). `{settings}` holds every setting and the batch-order rule;
`{weights}` the round-0 weights; `partition_<k>/` client k's data (model inputs).

- With Flower (1.20 or later): `flwr run .` with {clients} SuperNodes (`num-supernodes`; the
  `local-simulation` federation of {pyproject}). SuperNode k must hold `partition-id` k (the
  simulation's default). The ServerApp prints the last round's table and writes every round's
  per-client scores to `{history}`. `package-dir` in {pyproject} is this folder.
- Without Flower: `python -c "from {app} import task; print(task.table(task.run_in_process('.')))"`
  runs the same client and server code in one process.

`{app}/task.py` holds the training, aggregation and evaluation (no Flower import);
`client_app.py` and `server_app.py` only carry its inputs and outputs in Flower messages.
"""


def pfllib_readme(spec, seed: int, partition, weights: dict) -> str:
    """How to run PFLlib's FedAvg on the export, and what differs from pflpipe."""
    fed = spec.federation
    # PFLlib's `-m DNN` is 784 → 100 → classes only for a dataset whose name holds "MNIST"
    prefix = "MNIST-" if tuple(partition.input_shape) == (1, 28, 28) else ""
    name = f"{prefix}pflpipe-{spec.experiment.name}"
    arguments = (f"-data {name} -m DNN -algo FedAvg -gr {fed.rounds} -ls {fed.local_epochs} "
                 f"-lbs {fed.batch_size} -lr {fed.lr:g} -nc {partition.n_clients} -ncl "
                 f"{partition.n_classes} -jr {fed.client_fraction:g} -eg 1 -t 1 -dev cpu")
    keys = ", ".join(f"`{key}`" for key in weights)
    return f"""\
# pflpipe's partition for PFLlib

Copy this folder to PFLlib's `dataset/{name}/`. PFLlib's own command, in its `system/`:

```
python main.py {arguments}
```

To train as pflpipe does (the same per-client test accuracies, round by round), run instead, in
this folder (`{PFLLIB_HISTORY}` gets every round's per-client accuracies):

```
python pfllib_run.py PATH/TO/PFLlib {arguments}
```

PFLlib reads `train/<k>.npz` and `test/<k>.npz` (it ignores `val/`) and prints the
sample-weighted mean test accuracy over clients after each round (`-eg 1`). What `pfllib_run.py`
changes, at run time (`{SETTINGS}` has pflpipe's settings and batch order):
- **log_softmax**: PFLlib's `DNN` ends in `F.log_softmax`, and its FedAvg splits the model into
  a base (the DNN with `fc` replaced by `nn.Identity`) and a head (`fc`). The log_softmax then
  falls on the 100 hidden features, between `fc1` and the head: the network is
  `fc(log_softmax(relu(fc1(x))))`, not pflpipe's MLP, and it learns far worse. The runner leaves
  the log_softmax out (PFLlib's clients train with `nn.CrossEntropyLoss`, which applies it).
- **model**: `-m DNN` is 784 → 100 → classes only for a dataset folder whose name holds `MNIST`
  (3072 → 100 for Cifar10, else 60 → 20): it matches pflpipe's `mlp` (`hidden: [100]`) only on
  28×28 images. pflpipe's keys are {keys}; in PFLlib's split model `base.1.*` is
  `base.fc1.*` and `head.*` stays `head.*`.
- **initial weights**: PFLlib seeds its own initialisation; the runner loads
  `{INITIAL_WEIGHTS}`.
- **batch order**: PFLlib's DataLoader shuffles with its own RNG and drops each client's last
  short batch (`drop_last=True`); the runner trains on pflpipe's batches
  (`pflpipe_fedavg/task.py`, `batch_order`).
- **reported number**: PFLlib reports the mean over all test samples, pflpipe each client's
  accuracy (and their mean over clients).
"""


def _json(path: Path, content: dict) -> Path:
    path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    return path


def _text(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path
