from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.base import FederatedParams


class PFedBayesParams(FederatedParams):
    """pFedBayes (Zhang et al. 2022): Bayesian personal and global networks, KL-tied.

    Local steps are full-batch (pFedVEM's setting): local_epochs is the number R of steps.
    """

    name: Literal["pfedbayes"]
    zeta: float = Field(10.0, gt=0, description="ζ: weight of KL(personal ‖ global).")
    init_std: float = Field(
        0.05, gt=0, description="Initial standard deviation σ₀ of every weight (personal, global)."
    )
    global_lr: float | None = Field(
        None, gt=0,
        description="Learning rate of the client's copy of the global distribution; the entry's "
        "lr (that of the personal one) when omitted.",
    )
    beta: float = Field(1.0, gt=0, description="Server mixing β: v ← (1−β)·v + β·mean(v_i).")
    mc_samples: int = Field(
        1, ge=1, description="K: Monte-Carlo samples per step (and for 'mc' prediction)."
    )
    predict: Literal["mean", "mc"] = Field(
        "mean", description="Personalized prediction: the posterior mean network or the "
        "Monte-Carlo predictive average over K sampled networks.",
    )
