from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


class PFedMeParams(FederatedParams):
    """pFedMe (Dinh et al. 2020): Moreau-envelope personal models."""

    name: Literal["pfedme"]
    lam: float = Field(15.0, gt=0, description="Regularization λ tying personal models to w.")
    inner_steps: int = Field(5, ge=1, description="K: steps solving the inner problem per batch.")
    personal_lr: float = Field(0.09, gt=0, description="Learning rate of the inner problem.")
    beta: float = Field(1.0, gt=0, description="Server mixing β: w ← (1−β)·w + β·mean(w_k).")
