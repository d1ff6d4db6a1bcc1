"""From a spec and a seed to per-client train/val/test indices (no samples copied yet).

A `predefined` partition takes them as given (`pflpipe.data.predefined`).

The seed becomes three independent NumPy generators (SeedSequence.spawn): one generates synthetic
data, one splits samples over clients, one splits each client into train/val/test. So changing
the split strategy never changes generated data, and the same spec and seed give the same plan.
"""

from dataclasses import dataclass, field

import numpy as np

from pflpipe.data import skews, splits
from pflpipe.data.client_split import ClientIndices, split_clients
from pflpipe.data.datasets import Pooled, load_pooled
from pflpipe.errors import DataError

#: ds4's k when the spec omits it (Per-FedAvg's values).
DS4_K_28x28, DS4_K_CIFAR10 = 196, 68


@dataclass(frozen=True, eq=False)
class PartitionPlan:
    """Which pooled samples every client holds, per split.

    Attributes:
        pooled: the dataset.
        clients: per client, its train/val/test positions in `pooled`.
        labels: [N] the labels stored (superclasses under concept drift, else pooled.y).
        n_classes: classes of `labels` (None for regression).
        resolved: parameters the data decided (e.g. ds4's k when the spec omits it).
        seed: the seed the plan was drawn with.
        source_classes: per client, the original classes it holds (concept drift only).

    """

    pooled: Pooled
    clients: tuple[ClientIndices, ...]
    labels: np.ndarray
    n_classes: int | None
    resolved: dict = field(default_factory=dict)
    seed: int = 0
    source_classes: tuple[list[int], ...] | None = None

    @property
    def n_assigned(self) -> int:
        """Samples held by some client."""
        return sum(client.n for client in self.clients)


def generators(seed: int) -> tuple[np.random.Generator, ...]:
    """Return the (data, split, client-split) generators of a seed."""
    return tuple(np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(3))


def partition_dataset(spec, seed: int) -> PartitionPlan:
    """Load the spec's dataset and split it over clients and, per client, into train/val/test."""
    data_rng, split_rng, client_rng = generators(seed)
    pooled = load_pooled(spec, data_rng)
    if spec.partition.strategy == "predefined":
        from pflpipe.data.predefined import predefined_clients

        labels = pooled.y if pooled.n_classes is not None else None
        per_client, resolved = predefined_clients(spec, pooled, labels, client_rng)
        return PartitionPlan(pooled=pooled, clients=tuple(per_client), labels=pooled.y,
                             n_classes=pooled.n_classes, resolved=resolved, seed=seed)
    clients, superclass, resolved = assign_clients(spec.partition, pooled, split_rng)
    labels, n_classes, source = pooled.y, pooled.n_classes, None
    if superclass is not None:
        source = tuple(np.unique(pooled.y[indices]).tolist() for indices in clients)
        labels, n_classes = superclass[pooled.y], int(superclass.max()) + 1
    fractions = spec.partition.fractions
    per_client = split_clients(clients, labels if n_classes is not None else None,
                               fractions.val, fractions.test, client_rng)
    return PartitionPlan(pooled=pooled, clients=tuple(per_client), labels=labels,
                         n_classes=n_classes, resolved=resolved, seed=seed,
                         source_classes=source)


def ignored_splits(spec, pooled: Pooled) -> str | None:
    """Say when the data's own train/val/test split of its samples is not the one used."""
    if pooled.splits is None or spec.partition.strategy == "predefined":
        return None
    return (f"the data file's 'split' array is not read: partition.strategy "
            f"{spec.partition.strategy} splits each client's rows by partition.fractions; to "
            "keep the file's train/val/test rows, use partition: {strategy: predefined}")


def assign_clients(section, pooled: Pooled, rng: np.random.Generator
                   ) -> tuple[list[np.ndarray], np.ndarray | None, dict]:
    """Run the spec's strategy.

    Returns:
        Per-client index arrays, the superclass map under concept drift (else None), and the
        parameters the data resolved.

    """
    n_clients, strategy = section.n_clients, section.strategy
    limits = splits.Limits(section.min_samples, section.max_retries)
    _check_total(section, pooled)
    if strategy == "natural":
        if pooled.groups is None:
            raise DataError(f"partition 'natural' needs client groups; dataset {pooled.name!r} "
                            "has none (an arrays file needs a 'client' array)")
        return splits.natural(pooled.groups, n_clients, limits=limits), None, {}
    if pooled.n_classes is None and strategy != "iid":
        raise DataError(f"strategy {strategy!r} needs class labels; {pooled.name!r} is a "
                        "regression dataset")
    labels, n_classes = pooled.y, pooled.n_classes
    skew = getattr(section, "quantity_skew", None)
    sigma = skew.sigma if skew is not None else None
    if strategy == "iid":
        return splits.iid(len(labels), n_clients, rng, skew_sigma=sigma, limits=limits), None, {}
    if strategy == "ds1":
        clients, size = splits.ds1(labels, n_classes, n_clients, section.classes_per_client, rng,
                                   samples_per_client=section.samples_per_client, limits=limits)
        return clients, None, {"samples_per_client": size}
    if strategy == "ds2":
        return splits.ds2(labels, n_classes, n_clients, section.alpha, rng, limits=limits), None, {}
    if strategy == "dirichlet":
        clients, size = splits.dirichlet(labels, n_classes, n_clients, section.alpha, rng,
                                         samples_per_client=section.samples_per_client,
                                         limits=limits)
        return clients, None, {"samples_per_client": size}
    if strategy == "ds3":
        return splits.ds3(labels, n_classes, n_clients, rng, limits=limits,
                          classes_per_client=section.classes_per_client, mu=section.mu,
                          sigma=section.sigma), None, {}
    if strategy == "ds4":
        clients, k = splits.ds4(labels, n_classes, n_clients, rng, k=section.k or _ds4_k(pooled),
                                limits=limits)
        return clients, None, {"k": k}
    if strategy == "shards":
        return skews.shards(labels, n_clients, section.shards_per_client, rng, skew_sigma=sigma,
                            limits=limits), None, {}
    if strategy == "label_skew":
        return skews.label_skew(labels, n_classes, n_clients, section.labels_per_client, rng,
                                shared_cuts=section.shared_cuts, skew_sigma=sigma,
                                limits=limits), None, {}
    superclass = _superclasses(section, pooled)
    clients = skews.concept_drift(labels, superclass, n_clients, rng, skew_sigma=sigma,
                                  limits=limits)
    return clients, superclass, {"groups": int(superclass.max()) + 1}


def _check_total(section, pooled: Pooled) -> None:
    """Fail at once when n_clients × min_samples exceeds the whole dataset."""
    needed = section.n_clients * section.min_samples
    if needed > pooled.n_samples:
        raise DataError(
            f"partition: {section.n_clients:,} clients × min_samples {section.min_samples} = "
            f"{needed:,} samples, but {pooled.name!r} has {pooled.n_samples:,} "
            f"({needed - pooled.n_samples:,} short); use at most "
            f"{pooled.n_samples // section.min_samples:,} clients or lower min_samples"
        )


def _ds4_k(pooled: Pooled) -> int | None:
    if pooled.input_shape[-2:] == (28, 28):
        return DS4_K_28x28
    return DS4_K_CIFAR10 if pooled.name == "cifar10" else None


def _superclasses(section, pooled: Pooled) -> np.ndarray:
    if pooled.superclass is not None and section.groups in (None, 20):
        return pooled.superclass
    if section.groups is None:
        raise DataError(f"concept_drift needs partition.groups for dataset {pooled.name!r}")
    return skews.consecutive_groups(pooled.n_classes, section.groups)
