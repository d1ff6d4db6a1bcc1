from typing import Literal

from pflpipe.spec.algorithms.params import FederatedParams


class FedPerParams(FederatedParams):
    """FedPer (Arivazhagan et al. 2019): base layers federated, head layers kept per client."""

    name: Literal["fedper"]
