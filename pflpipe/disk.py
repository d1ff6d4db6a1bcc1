"""How much disk a full run of a spec needs, from the spec alone (`pflpipe validate`, `run`).

Per seed, with P the bytes of one copy of the model's parameters (float32) and C the clients:

- the partition: the samples times a sample's bytes (its features as float32, its label and
  index), and `PARTITION_CLIENT` per client; for the synthetic dataset the expected client
  size exp(μ + σ²/2) + min_samples (log-normal), for a named dataset its size (at most
  `partition.samples_per_client` per client); unknown (not counted) for data read from files
  the spec does not describe;
- the results: C × (P + `FILE_OVERHEAD`) per model with per-client weights (local, each
  personalization entry) and FedAvg's two global models;
- the checkpoints (a local store only): `CHECKPOINT_COPIES` × C × P (a finished stage's
  checkpoint keeps its best models as links of the results' files, `checkpoint.compact`; the
  warm start's stay in its state file, and the stage training holds its clients' states until
  it finishes) and a global model per warm-start round;
- MLflow (a local sqlite store, tracking on): the clients' models once more (one file per model,
  `tracking.log_models`) and their per-client tables (a row per client and round it is scored
  in: every round, or with ``eval_clients: sampled`` its share of the rounds and the full ones);
- the report, the logs and an MLflow database's own tables: `FIXED`, and `REPORT_PER_CLIENT`
  per client (the report's and the collected results' per-client tables).

Against what runs wrote (benchmarks/scale.py: the synthetic dataset at 10, 100 and 1,000 clients,
tracking on) the estimate is 14 % above at 10 clients, 10 % above at 100 and 23 % above at
1,000 (where the partition's clients came out smaller than their expected size: 94 MB, not
123 MB). It is an estimate, not a bound.
"""

import math
import shutil
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from pflpipe.errors import PflpipeError

#: Copies of a client's model in the checkpoints when the run ends or a stage trains: the warm
#: start's best models (at most one per client, in its compacted state file) and the states of
#: the stage training (benchmarks/scale.py: 0.4 copies after a run of 1,000 clients).
CHECKPOINT_COPIES = 2
#: Bytes of a client's model file beyond its weights (the zip archive's records).
FILE_OVERHEAD = 2_400
#: Bytes of a sample beyond its features: its label and its index (int64 each).
SAMPLE_OVERHEAD = 16
#: Bytes of a client in the partition beyond its samples: its file's records, its manifest entry.
PARTITION_CLIENT = 6_500
#: Bytes of one client's row of one round in MLflow's history table (a dozen numbers as JSON).
TABLE_ROW = 300
#: What a run writes whatever its size: the report and its figures, the logs, an MLflow
#: database's own tables (benchmarks/scale.py at 10 clients: 4 MB beyond the clients' files,
#: and a 4 MB write-ahead log sqlite folds into the database on its next open).
FIXED = 5_000_000
#: The report's and the collected results' bytes per client and seed (benchmarks/scale.py:
#: 13 MB more at 1,000 clients than at 10).
REPORT_PER_CLIENT = 13_000


class DiskSpaceError(PflpipeError):
    """The results folder's file system has less free space than a full run needs (exit 2)."""

    bad_input = True


@dataclass(frozen=True)
class DiskEstimate:
    """The bytes a full run writes, by where (None: not known from the spec)."""

    partition: int | None
    results: int
    checkpoints: int
    tracking: int
    fixed: int = FIXED

    @property
    def total(self) -> int:
        """Every part's bytes (an unknown partition counts 0)."""
        return ((self.partition or 0) + self.results + self.checkpoints + self.tracking
                + self.fixed)

    def describe(self) -> str:
        """One line: the total, then each part.

        >>> DiskEstimate(2_000_000, 3_500_000, 10**9, 0, 4_000_000).describe()
        'about 1.0 GB (partition 2.0 MB, results 3.5 MB, checkpoints 1.0 GB, MLflow 0 B, \
report and logs 4.0 MB)'
        """
        partition = (size(self.partition) if self.partition is not None
                     else "not counted: read from the data")
        return (f"about {size(self.total)} (partition {partition}, results {size(self.results)}, "
                f"checkpoints {size(self.checkpoints)}, MLflow {size(self.tracking)}, "
                f"report and logs {size(self.fixed)})")


def size(n_bytes: float) -> str:
    """Bytes in decimal units.

    >>> size(0), size(999), size(28_400), size(3.2e9)
    ('0 B', '999 B', '28.4 kB', '3.2 GB')
    """
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n_bytes) < 1000 or unit == "PB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    raise AssertionError("unreachable")


def estimate(spec) -> DiskEstimate | None:
    """The disk a full run of `spec` needs; None when the model's size is not known."""
    from pflpipe.spec.dataset import n_classes_of

    shape = _input_shape(spec)
    n_classes = n_classes_of(spec.dataset)
    clients = spec.partition.n_clients
    if shape is None or n_classes is None or not clients:
        return None
    parameters = _parameters(spec.model, shape, n_classes)
    head = _head_parameters(spec.model, shape, n_classes)
    model = 4 * parameters
    seeds = len(spec.experiment.seeds)
    per_client_sets = int(spec.runs_local) + len(spec.personalization)
    # a client's saved model: its weights and what an entry keeps beside them (a spread, a copy)
    saved = per_client_sets * model + 4 * sum(
        entry.saved_beside(parameters, head, math.prod(shape)) for entry in spec.personalization)
    results = (clients * (saved + per_client_sets * FILE_OVERHEAD) + 2 * model
               + clients * REPORT_PER_CLIENT)
    local_store = getattr(spec.storage, "bucket", None) is None
    checkpoints = ((CHECKPOINT_COPIES * clients + spec.federation.rounds) * model
                   if local_store else 0)
    tracking = 0
    if spec.tracking.enabled and not str(spec.tracking.uri or "").startswith("http"):
        logged = clients * saved if spec.tracking.log_models else 0
        tracking = logged + per_client_sets * clients * _scored_rounds(spec) * TABLE_ROW
    samples = _samples(spec)
    partition = None if samples is None else (samples * (math.prod(shape) * 4 + SAMPLE_OVERHEAD)
                                              + clients * PARTITION_CLIENT)
    return DiskEstimate(None if partition is None else int(seeds * partition),
                        seeds * results, seeds * checkpoints, seeds * tracking)


def check_free_space(spec, results_dir: Path) -> DiskEstimate | None:
    """Raise DiskSpaceError when `results_dir`'s file system cannot hold a full run of `spec`."""
    need = estimate(spec)
    if need is None:
        return None
    existing = Path(results_dir).absolute()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if need.total > free:
        raise DiskSpaceError(
            f"experiment.output_dir: the results folder {results_dir} is on a file system with "
            f"{size(free)} free; a full run of this spec needs {need.describe()}. Free some "
            "space, give --results a folder on a larger disk, or make the run smaller "
            "(partition.n_clients, the personalization entries, tracking.log_models: false)")
    return need


def _parameters(model_spec, shape: tuple[int, ...], n_classes: int) -> int:
    """The model's parameter count: a built-in architecture's by arithmetic, without torch.

    Importing torch costs the CLI ~2 CPU s before the first task; a custom model, or a shape
    a built-in one cannot take, is built on torch's meta device (`count_parameters`), which
    also raises its SpecError.

    >>> from pflpipe.spec.model import MlpModel
    >>> _parameters(MlpModel(architecture="mlp", hidden=[100]), (1, 8, 8), 10)  # 6,500 + 1,010
    7510
    """
    counted = _builtin_parameters(model_spec, tuple(shape), n_classes)
    if counted is not None:
        return counted
    from pflpipe.models.check import count_parameters

    return count_parameters(model_spec, shape, n_classes)


def _builtin_parameters(model_spec, shape: tuple[int, ...], n_classes: int) -> int | None:
    """`pflpipe.models.zoo`'s layers counted (weights and biases); None where it does not apply.

    tests/unit/test_disk.py holds it equal to the zoo's models built on the meta device.
    """
    def dense(widths):   # fully connected layers through `widths`
        return sum(a * b + b for a, b in pairwise(widths))

    def conv(channels, kernel):   # convolutions through `channels`, square kernels
        return sum(a * b * kernel * kernel + b for a, b in pairwise(channels))

    arch = model_spec.architecture
    if arch in ("mlp", "logistic"):
        hidden = list(model_spec.hidden) if arch == "mlp" else []
        return dense([math.prod(shape), *hidden, n_classes])
    if len(shape) != 3:
        return None
    channels, height, width = shape
    if arch == "cnn6":
        return conv([channels, 32, 64, 128, 256, 100], 3) + dense([100, n_classes])
    side = [((size - 4) // 2 - 4) // 2 for size in (height, width)]   # two 5×5 conv + 2×2 pools
    if arch not in ("cnn_cifar", "fedavg_cnn") or min(side) < 1:
        return None
    if arch == "cnn_cifar":
        return conv([channels, 6, 16], 5) + dense([16 * side[0] * side[1], 120, 84, n_classes])
    return (conv([channels, 32, 64], 5)
            + dense([64 * side[0] * side[1], model_spec.hidden, n_classes]))


def _head_parameters(model_spec, shape: tuple[int, ...], n_classes: int) -> int | None:
    """A built-in model's head's parameters (its last linear layer, `head`), by arithmetic.

    None where the spec names its own head (`model.head`) or the model is custom.
    tests/unit/test_disk.py holds it equal to the zoo's head built on the meta device.
    """
    arch = model_spec.architecture
    if getattr(model_spec, "head", None) is not None or arch == "custom":
        return None
    if arch == "mlp" and model_spec.hidden:
        width = model_spec.hidden[-1]
    elif arch in ("mlp", "logistic"):
        width = math.prod(shape)
    else:
        width = {"cnn6": 100, "cnn_cifar": 84}.get(arch) or model_spec.hidden
    return width * n_classes + n_classes


def _scored_rounds(spec) -> float:
    """The rounds a client is scored in (its rows of the history table), round 0 included."""
    fed = spec.federation
    if fed.eval_clients == "all":
        return fed.rounds + 1
    full = fed.rounds / fed.full_eval_every if fed.full_eval_every else 0
    return fed.rounds * fed.client_fraction + full + 2


def _input_shape(spec) -> tuple[int, ...] | None:
    from pflpipe.spec.spec import IMAGE_SHAPES

    if spec.dataset.name == "synthetic":
        return (spec.dataset.dimension,)
    return IMAGE_SHAPES.get(spec.dataset.name)


def _samples(spec) -> float | None:
    """The samples of all clients together, where the spec says."""
    from pflpipe.spec.dataset import EMNIST_SIZES, SUBSET_SIZES

    dataset = spec.dataset
    if dataset.name == "synthetic":
        per_client = math.exp(dataset.mean_samples + dataset.sigma_samples ** 2 / 2)
        return spec.partition.n_clients * (per_client + dataset.min_samples)
    if dataset.name == "emnist":
        whole = sum(EMNIST_SIZES[dataset.split])
    elif dataset.name in SUBSET_SIZES:
        whole = sum(SUBSET_SIZES[dataset.name])
    else:
        return None
    per_client = getattr(spec.partition, "samples_per_client", None)
    return min(whole, spec.partition.n_clients * per_client) if per_client else whole
