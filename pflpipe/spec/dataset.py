"""The ``dataset`` section: where the samples come from."""

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from pflpipe.spec.strict_section import Section

#: Number of classes of each named dataset (EMNIST depends on its split).
N_CLASSES = {
    "mnist": 10,
    "fashion_mnist": 10,
    "cifar10": 10,
    "cifar100": 100,
    "digits": 10,
}
EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10,
                  "mnist": 10}
#: (train, test) sizes of the official subsets, for checks that need no data.
SUBSET_SIZES = {
    "mnist": (60_000, 10_000), "fashion_mnist": (60_000, 10_000), "cifar10": (50_000, 10_000),
    "cifar100": (50_000, 10_000), "digits": (1_797, 0),
}
EMNIST_SIZES = {
    "byclass": (697_932, 116_323), "bymerge": (697_932, 116_323), "balanced": (112_800, 18_800),
    "letters": (124_800, 20_800), "digits": (240_000, 40_000), "mnist": (60_000, 10_000),
}


def _check_s3_uri(value: str | None) -> str | None:
    if value is not None and not value.startswith("s3://"):
        raise ValueError(f"must be an s3:// URI such as s3://bucket/prefix (got {value!r})")
    if value is not None and len(value) <= len("s3://"):
        raise ValueError("must name a bucket, e.g. s3://bucket/prefix")
    return value


class ChannelStats(Section):
    """Explicit normalisation: per-channel mean and std of the scaled samples."""

    mean: list[float] = Field(min_length=1, description="Mean per channel (one value: all).")
    std: list[Annotated[float, Field(gt=0)]] = Field(
        min_length=1, description="Standard deviation per channel (one value: all)."
    )

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean and std need one value per channel each (got {len(self.mean)}"
                             f" and {len(self.std)})")
        return self


NORMALIZATION_DOC = (
    "How samples become model inputs, (x · scale − mean) / std per channel. `standard`: mean "
    "and std per channel (the published values of mnist, fashion_mnist, emnist, cifar10 and "
    "cifar100; for other data the pooled samples' own); `scale`: x · scale only (1/255 for "
    "uint8, 1/16 for digits, 1 for floats); `none`: the stored values; `per_feature`: "
    "(x · scale − μ) / (σ + 0.001) with μ and σ per feature (pixel) over the pooled training "
    "rows of every client, never validation or test (the FedProx and pFedMe MNIST "
    "generators' standardisation); or explicit `{mean: [...], std: [...]}` of the scaled samples."
)


def _normalization(default: str, when: str = ""):
    return Field(default, description=NORMALIZATION_DOC + when)


Normalization = Literal["standard", "scale", "none", "per_feature"] | ChannelStats
ArraysNormalization = Literal["auto", "standard", "scale", "none", "per_feature"] | ChannelStats
_AUTO = (" `auto`: `standard` for uint8 samples (as the torchvision datasets get), `none` for "
         "float samples (used as given).")


class _Files(Section):
    root: str = Field("data", description="Directory that holds (or receives) the dataset files; "
                      "a location you trust (docs/data.md, Trust).")
    source: str | None = Field(
        None,
        description="Optional s3:// URI you trust; its objects are downloaded into `root` before "
        "loading (credentials from the environment only).",
    )

    _s3 = field_validator("source")(_check_s3_uri)


class TorchvisionDataset(_Files):
    """A dataset read through torchvision's class from `root`, in torchvision's layout.

    `root/MNIST/raw/` holds IDX files, optionally gzipped (`FashionMNIST/`, `EMNIST/` alike);
    `root/cifar-10-batches-py/` and `root/cifar-100-python/` hold pickled batches.
    """

    name: Literal["mnist", "fashion_mnist", "cifar10", "cifar100"]
    subsets: Literal["train", "test", "both"] = Field(
        "both", description="Official subsets pooled before partitioning (the thesis pools both)."
    )
    allow_download: bool = Field(
        False, description="Download missing files from the official mirror into `root`."
    )
    normalization: Normalization = _normalization("standard")
    verify_checksums: bool = Field(
        True,
        description="cifar10/cifar100: open only files (batches, archive) with the official md5 "
        "checksums, since the batches are Python pickles and loading a pickle runs code from it. "
        "Set false only for repacked files you made or trust. (MNIST-family IDX files are read "
        "as bytes and need no check.)",
    )


class EmnistDataset(TorchvisionDataset):
    """EMNIST through torchvision, with its split."""

    name: Literal["emnist"]  # type: ignore[assignment]
    split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"] = Field(
        "balanced", description="EMNIST split (class set)."
    )


class DigitsDataset(_Files):
    """scikit-learn's bundled 8x8 digits (1,797 images, shipped inside the wheel)."""

    name: Literal["digits"]
    normalization: Normalization = _normalization(
        "scale", " Digits' pixels are 0..16, so `scale` maps them onto [0, 1].")


class ArraysDataset(_Files):
    """User data: an .npz file with arrays `x`, `y` (optional `client`, `split`), or a .pt dict.

    `x` is [n, d] features, [n, H, W] grey images or [n, C, H, W] images; `y` holds integer
    labels 0..n_classes-1. `client` (one integer per sample) defines the groups of the `natural`
    partition; with `split` too (0/1/2 or "train"/"val"/"test" per sample) the `predefined`
    partition uses exactly those per-client splits.
    """

    name: Literal["arrays"]
    path: str = Field(
        description="File with arrays x, y (and optionally client, split); relative to root."
    )
    n_classes: int | None = Field(
        None, ge=2, description="Number of classes; inferred as max(y)+1 when omitted."
    )
    normalization: ArraysNormalization = _normalization("auto", _AUTO)

    @field_validator("path")
    @classmethod
    def _suffix(cls, value: str) -> str:
        if not value.endswith((".npz", ".pt")):
            raise ValueError(f"must end in .npz or .pt (got {value!r})")
        return value


class ClientFilesDataset(_Files):
    """Data already split per client, in another tool's files under `root`/`path`.

    `pfllib`: PFLlib's dataset folder, `train/<k>.npz` and `test/<k>.npz` (optional `val/<k>.npz`)
    each holding `data` = {'x', 'y'}; `leaf`: LEAF's `train/*.json` and `test/*.json` (optional
    `val/`), `{"users", "user_data": {user: {"x", "y"}}}`; `flower`: pflpipe's Flower export,
    `partition_<k>/train.npz` (`val.npz`, `test.npz`) with arrays x, y. Clients keep their order
    (k, or the users' order in the first train file); the `predefined` partition uses their splits
    exactly, `natural` re-splits each client by `fractions`.
    """

    name: Literal["client_files"]
    layout: Literal["pfllib", "leaf", "flower"] = Field(description="The files' layout.")
    path: str = Field(".", description="The layout's directory, relative to root.")
    n_classes: int | None = Field(
        None, ge=2, description="Number of classes; inferred as max(y)+1 when omitted."
    )
    input_shape: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, min_length=1,
        description="Shape of one sample, e.g. [1, 28, 28] for LEAF's flat FEMNIST vectors; the "
        "files' own when omitted.",
    )
    normalization: ArraysNormalization = _normalization("auto", _AUTO)


class SyntheticDataset(Section):
    """FedProx/pFedMe Synthetic(α, β): per-client softmax models; clients are natural groups.

    Client k draws u_k ~ N(0, α), W_k, b_k ~ N(u_k, 1), B_k ~ N(0, β), v_k ~ N(B_k, 1) and
    x ~ N(v_k, Σ) with Σ_jj = j^-1.2, y = argmax(W_k x + b_k). Generated from the run's seed, with
    `partition.n_clients` clients.
    """

    name: Literal["synthetic"]
    alpha: float = Field(
        0.5, ge=0, description="Variance of the client model means u_k (model skew)."
    )
    beta: float = Field(
        0.5, ge=0, description="Variance of the client feature means B_k (feature skew)."
    )
    dimension: int = Field(60, ge=1, description="Number of features.")
    n_classes: int = Field(10, ge=2, description="Number of classes.")
    iid: bool = Field(False, description="Synthetic-IID: one shared model and feature mean.")
    mean_samples: float = Field(
        4.0, gt=0, description="Log-normal mean (log scale) of client sizes, as in FedProx."
    )
    sigma_samples: float = Field(2.0, ge=0, description="Log-normal sigma of client sizes.")
    min_samples: int = Field(
        50, ge=1, description="Added to every log-normal client size (FedProx adds 50)."
    )


class GaussianDataset(Section):
    """Self-FL's two-level Gaussian data: θ_m ~ N(θ₀, σ₀²), observations ~ N(θ_m, σ²).

    A regression task: every input is the constant 1 (x has shape [n, 1]), the target is the
    observation; the training loss is the observations' negative log-likelihood
    Σ (ŷ − y)² / (2σ²), summed over a batch (Self-FL's local objective), and the model
    `pflpipe.engine.two_level:ScalarMean` (architecture custom) estimates θ_m. Generated from
    the run's seed, with `partition.n_clients` clients.
    """

    name: Literal["gaussian"]
    theta0: float = Field(1.6, description="Global mean θ₀.")
    sigma0_sq: float = Field(1.0, ge=0, description="Between-client variance σ₀².")
    sigma_sq: float = Field(0.1, gt=0, description="Per-observation variance σ².")
    n_min: int = Field(10, ge=1, description="Smallest client size (uniform on [n_min, n_max]).")
    n_max: int = Field(200, ge=1, description="Largest client size.")

    @model_validator(mode="after")
    def _sizes_ordered(self):
        if self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_max ({self.n_max})")
        return self


Dataset = Annotated[
    TorchvisionDataset | EmnistDataset | DigitsDataset | ArraysDataset | ClientFilesDataset
    | SyntheticDataset | GaussianDataset,
    Field(discriminator="name"),
]

#: Datasets whose samples come already grouped by client (the `natural` partition).
GROUPED = ("synthetic", "gaussian", "client_files")
#: Datasets that may hold their own per-client splits (the `predefined` partition without path).
OWN_SPLITS = ("client_files", "arrays")
#: Datasets whose task is a regression (scored by mean squared error, not accuracy).
REGRESSION = ("gaussian",)


def task_of(dataset) -> str:
    """Return "regression" or "classification", the task of a dataset section."""
    return "regression" if dataset.name in REGRESSION else "classification"


def n_samples_of(dataset) -> int | None:
    """Return the number of pooled samples of a named dataset, or None when only the data knows."""
    if isinstance(dataset, EmnistDataset):
        train, test = EMNIST_SIZES[dataset.split]
    elif dataset.name in SUBSET_SIZES:
        train, test = SUBSET_SIZES[dataset.name]
    else:
        return None
    subsets = getattr(dataset, "subsets", "both")
    return {"train": train, "test": test, "both": train + test}[subsets]


def n_classes_of(dataset) -> int | None:
    """Return the number of classes of a dataset section, or None when only the data knows."""
    if isinstance(dataset, EmnistDataset):
        return EMNIST_CLASSES[dataset.split]
    if isinstance(dataset, SyntheticDataset):
        return dataset.n_classes
    if isinstance(dataset, ArraysDataset | ClientFilesDataset):
        return dataset.n_classes
    return N_CLASSES.get(dataset.name)
