from typing import Literal

from pydantic import Field, field_validator

from pflpipe.spec.algorithms.base import FederatedParams


class PFedBayesParams(FederatedParams):
    """pFedBayes (Zhang et al. 2022): Bayesian personal and global networks, KL-tied.

    Local steps are full-batch (pFedVEM's setting): local_epochs is the number R of steps.
    The defaults are the paper's code's (github.com/AllenBeau/pFedBayes, README's MNIST run):
    Adam on both distributions, personal and global learning rates 1e-3, R = 20, ζ = 10,
    σ₀ = softplus(−3) ≈ 0.05.
    """

    name: Literal["pfedbayes"]
    zeta: float = Field(10.0, gt=0, description="ζ: weight of KL(personal ‖ global).")
    init_std: float = Field(
        0.05, gt=0, description="Initial standard deviation σ₀ of every weight (personal, global)."
    )
    local_epochs: int | None = Field(
        20, ge=1, description="R: full-batch local steps per round (paper's code: 20); "
        "federation.local_epochs when null.",
    )
    optimizer: Literal["adam", "federation"] = Field(
        "adam",
        description="Local optimizer of both distributions: adam (the paper's code: its steps "
        "stay near lr where the KL's curvature ζ/(n·σ²) makes SGD steps explode on small "
        "clients) or federation (federation.optimizer).",
    )
    personal_lr: float | None = Field(
        1e-3, gt=0,
        description="Learning rate of the personal distribution q_θ (paper: 1e-3); the entry's "
        "lr when null.",
    )
    global_lr: float | None = Field(
        1e-3, gt=0,
        description="Learning rate of the client's copy of the global distribution q_v (paper: "
        "1e-3); the entry's lr when null.",
    )
    std_bounds: tuple[float, float] = Field(
        (1e-3, 10.0),
        description="Bounds [σ_min, σ_max] of every standard deviation σ = softplus(π) in the "
        "objective (personal and global): a spread outside them counts as the bound.",
    )
    beta: float = Field(1.0, gt=0, description="Server mixing β: v ← (1−β)·v + β·mean(v_i).")
    mc_samples: int = Field(
        1, ge=1, description="K: Monte-Carlo samples per step (and for 'mc' prediction)."
    )
    predict: Literal["mean", "mc"] = Field(
        "mean", description="Personalized prediction: the posterior mean network or the "
        "Monte-Carlo predictive average over K sampled networks.",
    )

    @field_validator("std_bounds")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] < value[1]:
            raise ValueError(f"must be 0 < σ_min < σ_max (got {list(value)})")
        return value
