"""What `pflpipe run` will find in the data, found before it runs (for `pflpipe validate`).

`pflpipe validate` checks what the spec alone determines. Where the data decides, it asks this
module, which partitions the first seed exactly as `partition_data` will (`partition_dataset`):
a `predefined` partition's file decides the clients and their validation rows, and a
normalisation computed from the data (`standard` without published values, `auto` of uint8
samples, `per_feature`) has its numbers only there. Both raise what `run` would raise
(`DataError`, naming the file and client) and say what `run` would warn.
"""

from dataclasses import dataclass

import numpy as np

#: Datasets whose `standard` normalisation is published constants (no need to read the data).
PUBLISHED = ("mnist", "fashion_mnist", "emnist", "cifar10", "cifar100")
#: Generated datasets: their features are used as generated.
GENERATED = ("synthetic", "gaussian")


@dataclass(frozen=True)
class Preview:
    """The first seed's partition as `run` will make it, in a few lines."""

    clients: str
    normalisation: str
    warnings: tuple[str, ...] = ()
    has_validation: bool = True


def needs_data(spec) -> bool:
    """Whether the spec alone cannot say what `run` will find (and `preview` must read data).

    A predefined partition's file decides its clients; per-feature statistics, the `standard`
    statistics of data without published values, and the scale of user arrays (their dtype)
    come from the data. Generated data, a torchvision dataset and digits otherwise need none.
    """
    name, choice = spec.dataset.name, getattr(spec.dataset, "normalization", "none")
    if spec.partition.strategy == "predefined" or choice == "per_feature":
        return True
    if name in GENERATED or name in PUBLISHED:
        return False
    return name != "digits" or choice == "standard"


def preview(spec) -> Preview:
    """Partition the first seed as `partition_data` will; describe its clients and inputs.

    Raises:
        DataError: what `partition_data` would raise (a predefined file's client count against
            `partition.n_clients`, validation rows for only some clients, a missing file, ...).

    """
    from pflpipe.data import partition_dataset
    from pflpipe.data.artifact import manifest_header
    from pflpipe.stages.partition_data import ClientSummary, validation_warnings

    plan = partition_dataset(spec, spec.experiment.seeds[0])
    clients = tuple(ClientSummary(k, len(c.train), len(c.val), len(c.test), None)
                    for k, c in enumerate(plan.clients))
    header = manifest_header(plan, spec.partition.model_dump(mode="json"))
    train = sum(c.n_train for c in clients)
    from pflpipe.data.plan import ignored_splits

    ignored = ignored_splits(spec, plan.pooled)
    warnings = validation_warnings(clients) + ((ignored,) if ignored else ())
    with_val = [c.n_val for c in clients if c.n_val]
    sizes = (f"{min(with_val)}" if with_val and min(with_val) == max(with_val)
             else f"{min(with_val, default=0)}–{max(with_val, default=0)}")
    val = f"validation rows for every client ({sizes} each)" if with_val else \
        "no validation rows"
    source = ""
    if spec.partition.strategy == "predefined":
        given = spec.partition.n_clients
        source = (f" (the file's; partition.n_clients {given} agrees)" if given
                  else " (the file's; partition.n_clients omitted)")
    return Preview(f"{len(clients)} clients{source}, {train:,} training rows; {val}",
                   normalisation(header["dataset"]["transform"], spec.dataset,
                                 header["dataset"]["dtype"], train),
                   warnings, bool(with_val))


def normalisation(transform: dict, dataset, dtype: str = "", train_rows: int = 0) -> str:
    """The normalisation in force, in words with its numbers (a manifest's `transform` entry).

    >>> from types import SimpleNamespace as S
    >>> normalisation({"scale": 0.0625, "mean": [0.0], "std": [1.0]}, S(name="digits",
    ...               normalization="scale"))
    'scale: x / 16 (mean 0, std 1: no centring)'
    >>> normalisation({"scale": 1 / 255, "mean": [0.42], "std": [0.25]}, S(name="arrays",
    ...               normalization="auto"), "uint8")
    "auto → standard (uint8 samples): (x / 255 − 0.42) / 0.25, the pooled samples' own mean and std"
    """
    choice = getattr(dataset, "normalization", "none")
    scale = transform.get("scale", 1.0)
    named = choice if isinstance(choice, str) else "explicit"
    if choice == "auto":
        named = f"auto → {'standard' if dtype == 'uint8' else 'none'} ({dtype} samples)"
    if transform.get("per_feature"):
        mean, std = np.asarray(transform["mean"]), np.asarray(transform["std"])
        return (f"per_feature: ({_scaled(scale)} − μ) / (σ + 0.001) per feature over "
                f"{train_rows:,} training rows of every client ({mean.size} features; μ "
                f"{mean.min():.4g} to {mean.max():.4g}, σ + 0.001 {std.min():.4g} to "
                f"{std.max():.4g})")
    mean, std = transform.get("mean", [0.0]), transform.get("std", [1.0])
    if all(m == 0 for m in mean) and all(s == 1 for s in std):
        return (f"{named}: the stored values as given" if scale == 1
                else f"{named}: {_scaled(scale)} (mean 0, std 1: no centring)")
    if isinstance(choice, str) and choice in ("standard", "auto"):
        whose = ("published" if dataset.name in PUBLISHED
                 else "the pooled samples' own")
    else:
        whose = "the spec's"
    return (f"{named}: ({_scaled(scale)} − {_numbers(mean)}) / {_numbers(std)}, {whose} mean "
            f"and std{' per channel' if len(mean) > 1 else ''}")


def _numbers(values) -> str:
    """One value as it is, several as a list: 0.1307 or [0.4914, 0.4822, 0.4465]."""
    text = ", ".join(f"{v:.4g}" for v in values)
    return text if len(values) == 1 else f"[{text}]"


def _scaled(scale: float) -> str:
    """The scaling in words, as x / n when the scale is 1/n: x / 255, x / 16, x · 0.5."""
    inverse = 1 / scale if scale else 0
    return f"x / {round(inverse)}" if scale and abs(inverse - round(inverse)) < 1e-9 \
        else f"x · {scale:.6g}"


def known_normalisation(dataset) -> str:
    """The normalisation of data that `needs_data` need not read, from the spec alone.

    A torchvision dataset's samples are uint8 with published statistics, digits' 0..16 on one
    channel, generated features are used as they are.
    """
    from pflpipe.data.datasets import normalization
    from pflpipe.data.vision import NORMALISATION

    if dataset.name in GENERATED:
        return normalisation({}, dataset)
    published = NORMALISATION.get(dataset.name)
    channels = np.zeros((1, len(published[0]) if published else 1, 1, 1), dtype=np.uint8)
    transform = normalization(dataset, channels, 1 / 255 if published else 1 / 16,
                              published=published)
    return normalisation(transform.to_json(), dataset, "uint8")
