from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


class FedProxParams(FederatedParams):
    """FedProx (Li et al. 2020): FedAvg with a proximal term μ/2 ‖w − w_global‖² on each client."""

    name: Literal["fedprox"]
    mu: float = Field(0.01, ge=0, description="μ: weight of the proximal term.")
