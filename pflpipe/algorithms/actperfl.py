"""ActPerFL (Chen, Ding, Tramel et al., Amazon Alexa AI): the short version of Self-FL.

The same two-level model, leave-one-out start (its Eqn. 9), step rule (Eqn. 7), variances
(Eqns. 11–12) and precision-weighted aggregation (Eqn. 10). As printed, its Algorithm 1 sets the
global model to the round's aggregate with no smoothing by the activity rate, and its sums run
over all M clients (`peer_set: all`, Self-FL's default too). Only the default `smoothing: false`
differs (ActPerFLParams).
"""

from pflpipe.algorithms.base import register
from pflpipe.algorithms.self_fl import SelfFL
from pflpipe.spec.algorithms.actperfl import ActPerFLParams


@register
class ActPerFL(SelfFL):
    """Self-FL without the smoothing of the global model."""

    @classmethod
    def params_type(cls):
        """ActPerFL's params model (SelfFL's with its own name and defaults)."""
        return ActPerFLParams
