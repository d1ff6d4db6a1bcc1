from typing import Literal

from pflpipe.spec.algorithms.params import FederatedParams


class LgFedAvgParams(FederatedParams):
    """LG-FedAvg (Liang et al. 2020): local representations, a federated head."""

    name: Literal["lg_fedavg"]
