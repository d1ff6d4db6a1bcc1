"""The ``partition`` section: how samples are spread over clients and split per client."""

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from pflpipe.spec.strict_section import Section


class Fractions(Section):
    """Per-client train / validation / test fractions.

    For a client of n samples, val and test get round(n · fraction) samples (at least one each
    when the fraction is above 0) and train the rest (at least one); each class is spread over the
    splits in proportion (±1). Omitted fractions take their defaults (0.6 / 0.2 / 0.2), except
    that they are 0 when the given ones already sum to 1: `{train: 0.75, test: 0.25}` has no
    validation split.
    """

    train: float = Field(
        0.6, gt=0, lt=1, description="Fraction of a client's samples for training."
    )
    val: float = Field(
        0.2, ge=0, lt=1,
        description="Fraction for validation (model selection). 0: no validation split; then "
        "each client's `best_val` model is its last round (or epoch), PersFL's teacher is the "
        "last warm-start round and its (λ, T) is chosen on the train split (the report says so).",
    )
    test: float = Field(0.2, gt=0, lt=1, description="Fraction for testing (reported accuracy).")

    @model_validator(mode="before")
    @classmethod
    def _omitted_take_the_rest(cls, data):
        if not isinstance(data, dict) or not data or len(data) == 3:
            return data
        given = [value for value in data.values() if isinstance(value, int | float)]
        if len(given) == len(data) and math.isclose(sum(given), 1.0, abs_tol=1e-6):
            return {"train": 0.0, "val": 0.0, "test": 0.0} | data
        return data

    @model_validator(mode="after")
    def _sum_to_one(self):
        total = self.train + self.val + self.test
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(
                f"train + val + test must sum to 1 (got {self.train} + {self.val} + {self.test}"
                f" = {total:g}); an omitted fraction is 0 only when the given ones sum to 1"
            )
        return self

    @property
    def has_validation(self) -> bool:
        """Whether clients get a validation split."""
        return self.val > 0


class QuantitySkew(Section):
    """Log-normal client-size skew that composes with a label-skew strategy.

    Client j draws a weight w_j ~ LogNormal(0, σ); its share of every class it holds is multiplied
    by w_j.
    """

    sigma: float = Field(1.0, gt=0, description="Log-normal σ of client size weights (μ = 0).")


class _Common(Section):
    """Settings every strategy shares."""

    n_clients: int = Field(10, ge=1, le=100_000, description="Number of simulated clients.")
    fractions: Fractions = Field(default_factory=Fractions, description="Per-client split.")
    min_samples: int = Field(
        10, ge=3,
        description="Every client must hold at least this many samples (3 at least: one per "
        "split). Random strategies redraw until it holds; fixed ones fail at once.",
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
    """Uniformly random assignment.

    Samples are shuffled, then cut into equal parts (or parts proportional to the quantity-skew
    weights).
    """

    strategy: Literal["iid"]


class Ds1Partition(_Common):
    """DS-1 (FedPer): equal client sizes, k classes per client, classes overlapping.

    Classes are dealt from a reshuffled deck (each class held by about n·k/C clients); a client
    takes samples_per_client/k samples of each of its classes (the remainder spread over its first
    classes).
    """

    strategy: Literal["ds1"]
    classes_per_client: int = Field(4, ge=1, description="Classes per client (k).")
    samples_per_client: int | None = Field(
        None, ge=1, description="Samples per client; the largest feasible size when omitted."
    )


class Ds2Partition(_Common):
    """DS-2 (Hsu et al. 2019): per class, the clients' shares are drawn from Dirichlet(α·1).

    As α → ∞ every client's class distribution approaches the prior class distribution p; as
    α → 0 each class goes to a single client. Draws are repeated until min_samples holds.
    """

    strategy: Literal["ds2"]
    alpha: float = Field(0.9, gt=0, description="Dirichlet concentration α.")


class DirichletPartition(_Common):
    """Dirichlet label skew of Hsu et al. (2019), as Flow splits CIFAR: equal client sizes.

    Each client draws a class prior p ~ Dirichlet(α·1) and its samples' labels one at a time from
    p (a class that runs out leaves every prior). Small α: a few classes per client.
    """

    strategy: Literal["dirichlet"]
    alpha: float = Field(0.1, gt=0, description="Dirichlet concentration α (Flow: 0.1 and 0.6).")
    samples_per_client: int | None = Field(
        None, ge=1, description="Samples per client; ⌊dataset size / n_clients⌋ when omitted."
    )


class Ds3Partition(_Common):
    """DS-3 (the pFedMe recipe): k classes per client, log-normal client sizes.

    Classes are dealt from a reshuffled deck; every client first gets ceil(min_samples/k) samples
    of each of its classes, then the rest of each class is shared among its holders in proportion
    to LogNormal(μ, σ) draws, one per (class, client).
    """

    strategy: Literal["ds3"]
    classes_per_client: int = Field(2, ge=1, description="Classes per client (2 in the thesis).")
    mu: float = Field(0.0, description="Log-normal μ of client sizes (cancels in the shares).")
    sigma: float = Field(2.0, ge=0, description="Log-normal σ of client sizes.")


class Ds4Partition(_Common):
    """DS-4 (Per-FedAvg): k images of each of classes 0-4, or k/2 of one and 2k of one of 5-9.

    Clients 0..⌈n/2⌉-1 hold k images of each of the first five classes; the others hold k/2 of one
    of the first five and 2k of one of classes 5-9 (both dealt evenly).
    """

    strategy: Literal["ds4"]
    k: int | None = Field(
        None, ge=2,
        description="Images per class, even; when omitted 196 for 28×28 images (MNIST-like), 68 "
        "for CIFAR-10, else the largest even k the data allows.",
    )

    @field_validator("k")
    @classmethod
    def _even(cls, value: int | None) -> int | None:
        if value is not None and value % 2:
            raise ValueError(f"must be even, since half the clients get k/2 images (got {value})")
        return value


class ShardsPartition(_Skewable):
    """Pathological non-IID (McMahan et al.): sort by label, cut into shards, deal them out.

    There are n_clients · shards_per_client equal shards (or shards proportional to the
    quantity-skew weight of their client), dealt at random.
    """

    strategy: Literal["shards"]
    shards_per_client: int = Field(2, ge=1, description="Shards per client.")


class LabelSkewPartition(_Skewable):
    """Label skew of pFedVEM: random labels per client, each label cut at random points.

    Each client draws labels_per_client labels from a reshuffled deck; each label's data is cut at
    random points into one non-empty part per holder.
    """

    strategy: Literal["label_skew"]
    labels_per_client: int = Field(5, ge=1, description="Labels drawn per client.")
    shared_cuts: bool = Field(
        False,
        description="Reuse one cut vector for every label (as the pFedVEM repository does); needs "
        "every label held by the same number of clients.",
    )


class ConceptDriftPartition(_Skewable):
    """Label concept drift of pFedVEM: one subclass per superclass, labelled by superclass.

    Classes are grouped into superclasses; each client holds one random subclass per superclass
    (dealt from a reshuffled deck per superclass), each subclass's data is cut at random points
    among its holders, and labels become superclasses.
    """

    strategy: Literal["concept_drift"]
    groups: int | None = Field(
        None, ge=2,
        description="Number of superclasses. CIFAR-100's 20 coarse groups when omitted or 20 on "
        "cifar100; otherwise consecutive classes (class c in group c // (n_classes / groups)).",
    )


class NaturalPartition(_Common):
    """The dataset's own client groups (synthetic generators, arrays with a `client` array).

    n_clients must equal the number of groups.
    """

    strategy: Literal["natural"]


class PredefinedPartition(Section):
    """Given per-client train / val / test rows, used exactly (in the given order).

    With `path`: an index file of positions in the pooled dataset (the official subsets in
    torchvision's order, train first, or the rows of an arrays file): `.npz` with arrays
    `train_<k>`, `val_<k>` (optional) and `test_<k>` for clients k = 0, 1, …, or `.json` holding
    `{"clients": [{"train": [...], "val": [...], "test": [...]}, ...]}` or LEAF-style
    `{"users": [...], "user_data": {user: {"train": [...], ...}}}`. `pflpipe split --export npz`
    writes such a file. Without `path`: the dataset's own per-client splits (a `client_files`
    dataset, or an arrays file with `client` and `split` arrays).
    """

    strategy: Literal["predefined"]
    path: str | None = Field(
        None,
        description="Index file (.npz or .json), relative to dataset.root unless absolute; the "
        "dataset's own splits when omitted.",
    )
    n_clients: int | None = Field(
        None, ge=1, le=100_000,
        description="Number of clients, checked against the file; taken from it when omitted "
        "(required for the generated datasets, which are drawn per client).",
    )
    val_from_train: float = Field(
        0.0, ge=0, lt=1,
        description="For clients given no validation rows: the fraction of each client's train "
        "rows held out as validation (stratified, seeded). 0: no validation split.",
    )

    @field_validator("path")
    @classmethod
    def _suffix(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith((".npz", ".json")):
            raise ValueError(f"must end in .npz or .json (got {value!r})")
        return value


Partition = Annotated[
    IidPartition | Ds1Partition | Ds2Partition | DirichletPartition | Ds3Partition | Ds4Partition
    | ShardsPartition | LabelSkewPartition | ConceptDriftPartition | NaturalPartition
    | PredefinedPartition,
    Field(discriminator="strategy"),
]
