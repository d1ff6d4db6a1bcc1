"""What a training stage prepares before it trains.

The partition on the engine's device, the seeded model, its context and trainer, and the engine
settings the spec gives (threads, device, compile, optimizer).
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from pflpipe.engine import distributed, precision
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import Context, make_trainer
from pflpipe.engine.tree import Group
from pflpipe.engine.two_level import GaussianLikelihood
from pflpipe.errors import DataError
from pflpipe.events import notice
from pflpipe.models import build_model, head_keys
from pflpipe.models.check import check_model


@dataclass
class Setup:
    """A partition on the engine's device with the spec's model, context and trainer."""

    data: FederatedData
    ctx: Context
    trainer: object
    init: Group                 # the seeded initial parameters
    head: frozenset[str]
    partition_hash: str
    device: torch.device
    compiled: bool = False      # the batched trainer compiles its steps (engine.compile)

    @property
    def has_validation(self) -> bool:
        """Whether the clients have a validation split (a partition has it for all or none)."""
        return has_validation(self.data)


def has_validation(data: FederatedData) -> bool:
    """Whether the clients have validation samples."""
    return bool(data.val.counts.sum() > 0)


def scored_splits(data: FederatedData) -> tuple[str, ...]:
    """The splits results are reported on: val and test, or test alone without validation."""
    return ("val", "test") if has_validation(data) else ("test",)


def use_threads(engine) -> int:
    """Set torch's CPU threads to `engine.threads` when given; note the number the stage uses."""
    if engine.threads:
        torch.set_num_threads(engine.threads)
    count = torch.get_num_threads()
    notice(f"{count} torch thread{'s' if count > 1 else ''}")
    return count


def device_of(engine) -> torch.device:
    """The device `engine.device` names ('auto': CUDA when available)."""
    if engine.device == "cuda" and not torch.cuda.is_available():
        raise DataError("engine.device is 'cuda' but no CUDA device is available; use 'auto' "
                        "or 'cpu'")
    if engine.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(engine.device)


def setup(spec, seed: int, partition_dir: Path, shard: int | None = None) -> Setup:
    """Load the partition and build the seeded model, context and trainer.

    With `shard` = k, the data holds only the k-th of the spec's `engine.shards` client shards
    (`client_shards`), its clients keeping their ids.
    """
    from pflpipe.data import load_partition

    use_threads(spec.engine)
    partition = load_partition(partition_dir)
    device = device_of(spec.engine)
    splits = {name: SplitData.from_clients([c.split(name).x for c in partition.clients],
                                           [c.split(name).y for c in partition.clients])
              for name in ("train", "val", "test")}
    data = FederatedData(**splits)
    if shard is not None:
        if not 0 <= shard < spec.engine.shards:
            raise DataError(f"shard {shard} does not exist: engine.shards is "
                            f"{spec.engine.shards}")
        bounds = client_shards(data.train.counts, spec.engine.shards)
        data = data.shard(bounds[shard], bounds[shard + 1])
        notice(f"shard {shard + 1}/{spec.engine.shards}: clients {bounds[shard]}–"
               f"{bounds[shard + 1] - 1}")
    data = data.to(device)
    n_outputs = partition.n_classes if partition.task == "classification" else 1
    check_model(spec, partition.input_shape, n_outputs, len(data.train.counts))  # names the field
    model = build_model(spec.model, partition.input_shape, n_outputs, seed)
    ctx = (GaussianLikelihood(model.to(device), sigma_sq=spec.dataset.sigma_sq)
           if spec.dataset.name == "gaussian" else Context(model.to(device), partition.task))
    ctx.precision = spec.engine.precision
    precision.use(spec.engine.precision)
    init = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
    compiled = spec.engine.mode == "batched" and use_compile(spec, data, device)
    trainer = make_trainer(spec.engine.mode, ctx, spec.engine.max_members, compiled, notice)
    return Setup(data, ctx, trainer, init, head_keys(model, spec.model), partition.content_hash,
                 device, compiled)


def client_shards(counts: torch.Tensor, shards: int) -> list[int]:
    """Bounds [shards + 1] of contiguous client shards of about equal training samples.

    Every shard holds one client or more (the spec allows at most one shard per client).

    >>> client_shards(torch.tensor([90, 5, 5]), 3)
    [0, 1, 2, 3]
    >>> client_shards(torch.tensor([10, 10, 10, 10]), 2)
    [0, 2, 4]
    """
    bounds = distributed.shard_bounds(counts.clamp_min(1), shards)
    for k in range(1, shards):
        bounds[k] = max(bounds[k], bounds[k - 1] + 1)
    for k in range(shards - 1, 0, -1):
        bounds[k] = min(bounds[k], bounds[k + 1] - 1)
    return bounds


def use_compile(spec, data: FederatedData, device: torch.device) -> bool:
    """Resolve `engine.compile` ('auto': `pflpipe.engine.compiled.pays_off`); note compiling."""
    setting = spec.engine.compile
    if setting == "auto":
        from pflpipe.engine.compiled import pays_off

        batches = -(-int(data.train.counts.max()) // spec.federation.batch_size)
        epochs = max(spec.federation.rounds * spec.federation.local_epochs,
                     spec.distillation.epochs)
        setting = pays_off(device, epochs * batches)
    if setting:
        notice("compiled steps (engine.compile)")
    return setting


def optimizer(spec) -> OptimizerConfig:
    """The spec's local optimizer."""
    return OptimizerConfig.from_spec(spec.federation)


def plan_settings(spec) -> dict:
    """The `Plan` settings every federated stage takes from the spec as they are."""
    fed = spec.federation
    return {"optimizer": optimizer(spec), "eval_clients": fed.eval_clients,
            "full_eval_every": fed.full_eval_every,
            "checkpoint_every": spec.engine.checkpoint_every,
            "divergence_factor": fed.divergence_factor}


def engine_key(spec, s: Setup | None = None) -> dict:
    """The spec settings that change trained numbers (compiled steps round differently)."""
    key = {"model": spec.model.model_dump(mode="json"), "engine": spec.engine.mode,
           "device": str(device_of(spec.engine))}
    if s is not None and s.compiled:
        key["compile"] = True
    if spec.engine.precision != "fp32":
        key["precision"] = spec.engine.precision
    return key
