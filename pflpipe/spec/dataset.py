"""The ``dataset`` section: where the samples come from."""

from typing import Annotated, Literal

from pydantic import Field, field_validator

from pflpipe.spec.base import Section

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


def _check_s3_uri(value: str | None) -> str | None:
    if value is not None and not value.startswith("s3://"):
        raise ValueError(f"must be an s3:// URI such as s3://bucket/prefix (got {value!r})")
    if value is not None and len(value) <= len("s3://"):
        raise ValueError("must name a bucket, e.g. s3://bucket/prefix")
    return value


class _Files(Section):
    root: str = Field("data", description="Directory that holds (or receives) the dataset files.")
    source: str | None = Field(
        None,
        description="Optional s3:// URI; its objects are downloaded into `root` before loading "
        "(credentials from the environment only).",
    )

    _s3 = field_validator("source")(_check_s3_uri)


class TorchvisionDataset(_Files):
    """A dataset read through torchvision's class (IDX files for MNIST, pickles for CIFAR)."""

    name: Literal["mnist", "fashion_mnist", "cifar10", "cifar100"]
    subsets: Literal["train", "test", "both"] = Field(
        "both", description="Official subsets pooled before partitioning (the thesis pools both)."
    )
    allow_download: bool = Field(
        False, description="Download missing files from the official mirror into `root`."
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


class ArraysDataset(_Files):
    """User data: an .npz file with arrays `x`, `y` (optional `client`), or a .pt dict."""

    name: Literal["arrays"]
    path: str = Field(description="File with arrays x, y (and optionally client); relative to root.")
    n_classes: int | None = Field(
        None, ge=2, description="Number of classes; inferred as max(y)+1 when omitted."
    )

    @field_validator("path")
    @classmethod
    def _suffix(cls, value: str) -> str:
        if not value.endswith((".npz", ".pt")):
            raise ValueError(f"must end in .npz or .pt (got {value!r})")
        return value


class SyntheticDataset(Section):
    """FedProx/pFedMe Synthetic(α, β): per-client softmax models; clients are natural groups."""

    name: Literal["synthetic"]
    alpha: float = Field(0.5, ge=0, description="Variance of client model means (model skew).")
    beta: float = Field(0.5, ge=0, description="Variance of client feature means (feature skew).")
    dimension: int = Field(60, ge=1, description="Number of features.")
    n_classes: int = Field(10, ge=2, description="Number of classes.")
    iid: bool = Field(False, description="Synthetic-IID: one shared model and feature mean.")
    mean_samples: float = Field(
        4.0, gt=0, description="Log-normal mean (log scale) of client sizes, as in FedProx."
    )
    sigma_samples: float = Field(2.0, ge=0, description="Log-normal sigma of client sizes.")
    min_samples: int = Field(50, ge=1, description="Every client gets at least this many samples.")


class GaussianDataset(Section):
    """Self-FL's two-level Gaussian data: θ_m ~ N(θ₀, σ₀²), observations ~ N(θ_m, σ²)."""

    name: Literal["gaussian"]
    theta0: float = Field(1.6, description="Global mean θ₀.")
    sigma0_sq: float = Field(1.0, ge=0, description="Between-client variance σ₀².")
    sigma_sq: float = Field(0.1, gt=0, description="Per-observation variance σ².")
    n_min: int = Field(10, ge=1, description="Smallest client size (uniform on [n_min, n_max]).")
    n_max: int = Field(200, ge=1, description="Largest client size.")


Dataset = Annotated[
    TorchvisionDataset | EmnistDataset | DigitsDataset | ArraysDataset | SyntheticDataset
    | GaussianDataset,
    Field(discriminator="name"),
]

#: Datasets whose samples come already grouped by client (the `natural` partition).
GROUPED = ("synthetic", "gaussian")


def n_classes_of(dataset) -> int | None:
    """Return the number of classes of a dataset section, or None when only the data knows."""
    if isinstance(dataset, EmnistDataset):
        return EMNIST_CLASSES[dataset.split]
    if isinstance(dataset, SyntheticDataset):
        return dataset.n_classes
    if isinstance(dataset, ArraysDataset):
        return dataset.n_classes
    return N_CLASSES.get(dataset.name)
