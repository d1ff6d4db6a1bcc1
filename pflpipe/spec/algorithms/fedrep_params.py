from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


class FedRepParams(FederatedParams):
    """FedRep (Collins et al. 2021): each round the client's own head first, then the shared base.

    The base's epochs are the entry's (or the federation's) local epochs.
    """

    name: Literal["fedrep"]
    head_epochs: int = Field(
        10, ge=1, description="Epochs on the client's head, base frozen, before the base's epochs."
    )
