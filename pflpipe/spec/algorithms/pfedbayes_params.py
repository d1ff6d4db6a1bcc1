from typing import Literal

from pydantic import Field, model_validator

from pflpipe.spec.algorithms.params import FederatedParams

#: The personal and global learning rates of the paper's code (README's MNIST run).
PAPER_LR = 1e-3


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
        None, gt=0,
        description="Learning rate of the personal distribution q_θ; the entry's lr when "
        "omitted, and the paper's 1e-3 (PAPER_LR) when that is omitted too — never "
        "federation.lr, whose SGD steps are on another scale than Adam's.",
    )
    global_lr: float | None = Field(
        None, gt=0,
        description="Learning rate of the client's copy of the global distribution q_v; as "
        "personal_lr when omitted.",
    )
    min_std: float = Field(
        1e-3, gt=0,
        description="σ_min: every standard deviation σ = softplus(π) in the objective (personal "
        "and global) counts as at least this (a bounded spread).",
    )
    max_std: float = Field(
        10.0, gt=0, description="σ_max: and as at most this."
    )
    beta: float = Field(1.0, gt=0, description="Server mixing β: v ← (1−β)·v + β·mean(v_i).")
    mc_samples: int = Field(
        1, ge=1, description="K: Monte-Carlo samples per step (and for 'mc' prediction)."
    )
    predict: Literal["mean", "mc"] = Field(
        "mean", description="Personalized prediction: the posterior mean network or the "
        "Monte-Carlo predictive average over K sampled networks.",
    )

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_std >= self.max_std:
            raise ValueError(f"min_std ({self.min_std}) must be below max_std ({self.max_std})")
        return self

    @property
    def std_bounds(self) -> tuple[float, float]:
        """(σ_min, σ_max)."""
        return self.min_std, self.max_std

    def learning_rates(self) -> tuple[float, float]:
        """(personal, global) learning rates: their own, else the entry's lr, else PAPER_LR."""
        personal = self.personal_lr or self.lr or PAPER_LR
        return personal, self.global_lr or personal

    def saved_beside(self, model: int, head: int | None, features: int) -> int:
        """Every weight's spread (the posterior's scale)."""
        return model
