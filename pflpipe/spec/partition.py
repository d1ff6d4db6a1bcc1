"""The ``partition`` section: how samples are spread over clients and split per client."""

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from pflpipe.spec.base import Section


class Fractions(Section):
    """Per-client train / validation / test fractions."""

    train: float = Field(0.6, gt=0, lt=1, description="Fraction of a client's samples for training.")
    val: float = Field(0.2, gt=0, lt=1, description="Fraction for validation (model selection).")
    test: float = Field(0.2, gt=0, lt=1, description="Fraction for testing (reported accuracy).")

    @model_validator(mode="after")
    def _sum_to_one(self):
        total = self.train + self.val + self.test
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(
                f"train + val + test must sum to 1 (got {self.train} + {self.val} + {self.test}"
                f" = {total:g})"
            )
        return self


class QuantitySkew(Section):
    """Log-normal client-size skew; composes with a label-skew strategy."""

    sigma: float = Field(1.0, gt=0, description="Log-normal σ of client size weights (μ = 0).")


class _Common(Section):
    n_clients: int = Field(10, ge=1, le=100_000, description="Number of simulated clients.")
    fractions: Fractions = Field(default_factory=Fractions, description="Per-client split.")
    min_samples: int = Field(
        10, ge=3, description="Every client must hold at least this many samples."
    )
    max_retries: int = Field(
        100, ge=1, le=100_000,
        description="Draws tried before a random split that violates min_samples is rejected.",
    )


class _Skewable(_Common):
    quantity_skew: QuantitySkew | None = Field(
        None, description="Optional log-normal quantity skew on top of the label skew."
    )


class IidPartition(_Skewable):
    """Uniformly random assignment."""

    strategy: Literal["iid"]


class Ds1Partition(_Common):
    """DS-1: equal client sizes, k classes per client, classes overlapping between clients."""

    strategy: Literal["ds1"]
    classes_per_client: int = Field(4, ge=1, description="Classes per client (k).")
    samples_per_client: int | None = Field(
        None, ge=1, description="Samples per client; the largest feasible size when omitted."
    )


class Ds2Partition(_Common):
    """DS-2: per class, client shares drawn from Dirichlet(α·p), p the prior class distribution."""

    strategy: Literal["ds2"]
    alpha: float = Field(0.9, gt=0, description="Dirichlet concentration α.")


class Ds3Partition(_Common):
    """DS-3: 2 classes per client, log-normal(μ, σ) client sizes (the pFedMe recipe)."""

    strategy: Literal["ds3"]
    classes_per_client: int = Field(2, ge=1, description="Classes per client (2 in the thesis).")
    mu: float = Field(0.0, description="Log-normal μ of client sizes.")
    sigma: float = Field(2.0, ge=0, description="Log-normal σ of client sizes.")


class Ds4Partition(_Common):
    """DS-4 (Per-FedAvg): half the clients hold k images of each of the first five classes, the
    other half k/2 of one of the first five and 2k of one of the last five."""

    strategy: Literal["ds4"]
    k: int | None = Field(
        None, ge=2, description="Images per class; 196 for MNIST, 68 for CIFAR-10 when omitted."
    )


class ShardsPartition(_Skewable):
    """Pathological non-IID (McMahan et al.): sort by label, cut into shards, deal them out."""

    strategy: Literal["shards"]
    shards_per_client: int = Field(2, ge=1, description="Shards per client.")


class LabelSkewPartition(_Skewable):
    """pFedVEM label skew: n labels per client, each label's data cut at random points."""

    strategy: Literal["label_skew"]
    labels_per_client: int = Field(5, ge=1, description="Labels drawn per client.")
    shared_cuts: bool = Field(
        False, description="Reuse one cut vector for every label (as the pFedVEM repository does)."
    )


class ConceptDriftPartition(_Skewable):
    """pFedVEM label concept drift: classes are grouped into superclasses; each client holds one
    random subclass per superclass and is labelled with the superclass (relabelling)."""

    strategy: Literal["concept_drift"]
    groups: int | None = Field(
        None, ge=2,
        description="Number of superclasses; CIFAR-100's 20 coarse groups when omitted.",
    )


class NaturalPartition(_Common):
    """The dataset's own client groups (synthetic generators, arrays with a `client` array)."""

    strategy: Literal["natural"]


Partition = Annotated[
    IidPartition | Ds1Partition | Ds2Partition | Ds3Partition | Ds4Partition | ShardsPartition
    | LabelSkewPartition | ConceptDriftPartition | NaturalPartition,
    Field(discriminator="strategy"),
]
