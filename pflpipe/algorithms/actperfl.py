"""ActPerFL (Chen, Ding, Tramel et al., Amazon Alexa AI): the short version of Self-FL.

The same two-level model, leave-one-out start (its Eqn. 9), step rule (Eqn. 7), variances
(Eqns. 11–12) and precision-weighted aggregation (Eqn. 10). Two defaults differ
(ActPerFLParams), as printed: the sums Σ_{k≠m} of Eqns. 9–10 run over all M clients
(`peer_set: all`: the server keeps every client's latest σ̂_k²; Self-FL's clients sum over the
round's), and Algorithm 1 sets the global model to the round's aggregate, without Self-FL's
smoothing by the activity rate (`smoothing: false`).
"""

from pflpipe.algorithms.algorithm import register
from pflpipe.algorithms.self_fl import SelfFL
from pflpipe.spec.algorithms.actperfl_params import ActPerFLParams


@register
class ActPerFL(SelfFL):
    """Self-FL with every client as a peer and no smoothing of the global model."""

    @classmethod
    def params_type(cls):
        """ActPerFL's params model (SelfFL's with its own name and defaults)."""
        return ActPerFLParams
