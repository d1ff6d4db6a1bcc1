from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


class ScaffoldParams(FederatedParams):
    """SCAFFOLD (Karimireddy et al. 2020): control variates correct the clients' drift."""

    name: Literal["scaffold"]
    server_lr: float = Field(
        1.0, gt=0, description="η_g: global step size; 1 takes the clients' (weighted) mean."
    )
