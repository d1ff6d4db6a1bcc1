"""Parameters of every personalization algorithm.

One model per algorithm, the only home of its defaults. The algorithm's code lives in
``pflpipe/algorithms/<name>.py``; the parameters live here so that validating a spec never imports
torch.
"""

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from pflpipe.spec.base import Section


class Params(Section):
    """Fields every algorithm entry accepts."""

    label: str | None = Field(
        None,
        description="Name of this entry in results and MLflow; the algorithm name when omitted. "
        "Lets one spec compare the same algorithm with different parameters.",
    )
    lr: float | None = Field(None, gt=0, description="Learning rate; federation.lr when omitted.")
    batch_size: int | None = Field(
        None, ge=1, description="Mini-batch size; federation.batch_size when omitted."
    )

    @field_validator("label")
    @classmethod
    def _slug(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", value):
            raise ValueError(f"must be lowercase letters, digits, '-' or '_' (got {value!r})")
        return value

    @property
    def display_name(self) -> str:
        """The name this entry carries in result tables."""
        return self.label or self.name  # type: ignore[attr-defined]


class FederatedParams(Params):
    """Fields of algorithms that run federated rounds."""

    rounds: int | None = Field(None, ge=1, description="Rounds; federation.rounds when omitted.")
    local_epochs: int | None = Field(
        None, ge=1, description="Local epochs per round; federation.local_epochs when omitted."
    )
    warm_start: Literal["final", "none"] | int = Field(
        "final",
        description="Starting point: the FedAvg warm start's final global model, 'none' (the "
        "seeded initial model) or a round index of the warm start's checkpoints.",
    )
    eval_every: int = Field(1, ge=1, description="Evaluate the personalized models every n rounds.")

    @field_validator("warm_start")
    @classmethod
    def _round(cls, value):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"a round index must be 0 or more (got {value})")
        return value


class LocalParams(Params):
    """Local-only baseline: every client trains alone; its model is chosen on validation."""

    name: Literal["local"]
    epochs: int = Field(20, ge=1, description="Training epochs on the client's own data.")


class FedAvgFtParams(Params):
    """FedAvg-FT: the final FedAvg global model fine-tuned on each client's training data."""

    name: Literal["fedavg_ft"]
    epochs: int = Field(5, ge=1, description="Fine-tuning epochs.")


class FedPerParams(FederatedParams):
    """FedPer (Arivazhagan et al. 2019): base layers federated, head layers kept per client."""

    name: Literal["fedper"]


class PFedMeParams(FederatedParams):
    """pFedMe (Dinh et al. 2020): Moreau-envelope personal models."""

    name: Literal["pfedme"]
    lam: float = Field(15.0, gt=0, description="Regularization λ tying personal models to w.")
    inner_steps: int = Field(5, ge=1, description="K: steps solving the inner problem per batch.")
    personal_lr: float = Field(0.09, gt=0, description="Learning rate of the inner problem.")
    beta: float = Field(1.0, gt=0, description="Server mixing β: w ← (1−β)·w + β·mean(w_k).")


class PerFedAvgParams(FederatedParams):
    """Per-FedAvg (Fallah et al. 2020): MAML-style meta-learning, adapted by a step at test time."""

    name: Literal["per_fedavg"]
    variant: Literal["first_order", "hessian_free"] = Field(
        "first_order", description="FO (first-order MAML) or HF (Hessian-vector product estimate)."
    )
    alpha: float | None = Field(
        None, gt=0, description="α: step size of the inner (adaptation) step, also used to adapt "
        "the model before scoring; the entry's lr (federation.lr) when omitted."
    )
    beta: float | None = Field(
        None, gt=0,
        description="β: step size of the outer (meta) step; the entry's lr (federation.lr) when "
        "omitted.",
    )
    delta: float = Field(1e-3, gt=0, description="δ: finite-difference width of the HF variant.")
    adapt_steps: int = Field(1, ge=1, description="Adaptation steps (size α) before scoring.")


class DittoParams(FederatedParams):
    """Ditto (Li et al. 2021): personal models with a proximal term to the global model."""

    name: Literal["ditto"]
    lam: float = Field(0.1, ge=0, description="λ: pull of the personal model towards w.")
    personal_epochs: int = Field(1, ge=1, description="Epochs on the personal model per round.")


class ApflParams(FederatedParams):
    """APFL (Deng et al. 2020): a per-client mixture α·v + (1−α)·w of local and global models."""

    name: Literal["apfl"]
    alpha: float = Field(0.25, ge=0, le=1, description="Initial (or fixed) mixing weight α.")
    adaptive: bool = Field(
        False, description="Learn α per client by projected gradient descent on [0, 1]."
    )
    alpha_lr: float | None = Field(
        None, gt=0, description="Step size of α when adaptive; the model's lr when omitted."
    )


class PersFLParams(Params):
    """PersFL: per-client optimal teachers then λ/T grid-search distillation.

    Configured by the spec's `teachers` and `distillation` sections.
    """

    name: Literal["persfl"]


Algorithm = Annotated[
    LocalParams | FedAvgFtParams | FedPerParams | PFedMeParams | PerFedAvgParams
    | DittoParams | ApflParams | PersFLParams,
    Field(discriminator="name"),
]

#: Algorithms that run in the `personalize` stage (PersFL and the baselines have stages of
#: their own).
PERSONALIZE = ("fedavg_ft", "fedper", "pfedme", "per_fedavg", "ditto", "apfl")
