"""FedAvg-FT (e.g. Wang et al. 2019; Flow's "FedAvgFT"): FedAvg, then local fine-tuning.

The final FedAvg global model is fine-tuned on each client's training data. It differs from
local-only only in its starting point (the warm start's final global model), so it sends nothing
and one "round" is one fine-tuning epoch.
"""

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.spec.algorithms.fedavg_ft_params import FedAvgFtParams


@register
class FedAvgFT(Algorithm[FedAvgFtParams]):
    """Fine-tune the global model alone; keep the epoch whose validation accuracy is best."""

    def is_payload(self, key: str) -> bool:
        """Nothing is sent."""
        return False
