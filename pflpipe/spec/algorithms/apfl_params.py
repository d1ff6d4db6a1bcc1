from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


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
