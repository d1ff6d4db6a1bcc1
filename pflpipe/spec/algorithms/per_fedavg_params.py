from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


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
