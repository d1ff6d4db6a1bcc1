"""The ``model`` section: the network every client trains."""

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from pflpipe.spec.strict_section import Section


class _Model(Section):
    head: list[str] | None = Field(
        None,
        description="State-dict key prefixes of the personal head (FedPer, FedRep, pFedVEM); "
        "the architecture's own declaration when omitted.",
    )


class MlpModel(_Model):
    """Fully connected network; hidden=[100] is the thesis's MNIST DNN (784 → 100 → 10)."""

    architecture: Literal["mlp"]
    hidden: list[int] = Field([100], description="Hidden layer widths.")

    @field_validator("hidden")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(width < 1 for width in value):
            raise ValueError(f"every width must be at least 1 (got {value})")
        return value


class CnnCifarModel(_Model):
    """The thesis's CIFAR-10 CNN (pFedMe's).

    Two 5×5 convolutions with max-pooling, then fully connected 400 → 120 → 84 → classes.
    """

    architecture: Literal["cnn_cifar"]


class LogisticModel(_Model):
    """Multinomial logistic regression (the synthetic-data model)."""

    architecture: Literal["logistic"]


class FedAvgCnnModel(_Model):
    """PFLlib's 4-layer "FedAvg CNN": conv32 → conv64 (5×5, max-pool) → fc → classes."""

    architecture: Literal["fedavg_cnn"]
    hidden: int = Field(512, ge=1, description="Width of the fully connected layer.")


class Cnn6Model(_Model):
    """pFedVEM's 6-layer CNN (CIFAR-100): five 3×3 convolutions (32-64-128-256-100), pooled to 100.

    Any image of 2×2 or more; global average pooling gives 100 features, then the head.
    """

    architecture: Literal["cnn6"]


class CustomModel(_Model):
    """A user's own nn.Module, built as ``cls(in_shape=..., n_classes=..., **kwargs)``."""

    architecture: Literal["custom"]
    path: str = Field(description="Import path 'package.module:ClassName'.")
    kwargs: dict[str, Any] = Field({}, description="Extra keyword arguments of the constructor.")

    @field_validator("path")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError(f"must look like 'package.module:ClassName' (got {value!r})")
        return value


Model = Annotated[
    MlpModel | CnnCifarModel | LogisticModel | FedAvgCnnModel | Cnn6Model | CustomModel,
    Field(discriminator="architecture"),
]
