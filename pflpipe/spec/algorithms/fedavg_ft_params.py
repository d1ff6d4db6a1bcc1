from typing import Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import StandaloneParams


class FedAvgFtParams(StandaloneParams):
    """FedAvg-FT: the final FedAvg global model fine-tuned on each client's training data."""

    name: Literal["fedavg_ft"]
    epochs: int = Field(5, ge=1, description="Fine-tuning epochs.")
