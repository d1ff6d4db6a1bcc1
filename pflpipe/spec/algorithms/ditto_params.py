from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import FederatedParams


class DittoParams(FederatedParams):
    """Ditto (Li et al. 2021): personal models with a proximal term to the global model."""

    name: Literal["ditto"]
    lam: float = Field(0.1, ge=0, description="λ: pull of the personal model towards w.")
    personal_epochs: int = Field(1, ge=1, description="Epochs on the personal model per round.")
