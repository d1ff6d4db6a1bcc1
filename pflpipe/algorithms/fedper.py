"""FedPer (Arivazhagan et al., 2019): federated base layers, a head kept per client.

Base layers are federated as in FedAvg, the head (personalization layers) never leaves the client.
A client scores with the global base plus its own head.
"""

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.spec.algorithms.fedper_params import FedPerParams


@register
class FedPer(Algorithm[FedPerParams]):
    """FedAvg on the base; the head stays local."""

    has_global_model = False   # the global head is never trained (never sent): no GA

    def is_payload(self, key: str) -> bool:
        """Only base keys are sent; the model's declared head stays with the client."""
        return key not in self.head
