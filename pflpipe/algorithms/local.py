"""Local-only baseline: every client trains alone on its own data, nothing is sent.

One "round" is one epoch, so the engine's per-round evaluation picks each client's model on its
validation split (the best epoch).
"""

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.spec.algorithms.local_params import LocalParams


@register
class Local(Algorithm[LocalParams]):
    """Train alone; keep the epoch whose validation accuracy is best."""

    has_global_model = False   # the seeded initial model never moves: no GA

    def is_payload(self, key: str) -> bool:
        """Nothing is sent."""
        return False
