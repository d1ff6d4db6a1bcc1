"""LG-FedAvg (Liang et al., 2020): local representations, a global head.

The opposite split of FedPer: every client trains its whole model each round, but only the head
(the model's declared head keys) is sent and averaged; the representation below it stays with
the client. A client scores with its own representation and the global head.
"""

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.spec.algorithms.lg_fedavg_params import LgFedAvgParams


@register
class LgFedAvg(Algorithm[LgFedAvgParams]):
    """FedAvg on the head; the representation stays local."""

    has_global_model = False   # the global representation is never trained (never sent): no GA

    def is_payload(self, key: str) -> bool:
        """Only the head's keys are sent."""
        return key in self.head
