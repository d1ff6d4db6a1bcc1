"""FedProx (Li et al., MLSys 2020): FedAvg whose clients minimise f(w) + μ/2 ‖w − w_global‖².

The proximal term keeps local models near the global model w_global the client received; the
server averages as FedAvg does.
"""

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.engine.tree import sq_dist
from pflpipe.spec.algorithms.fedprox_params import FedProxParams


@register
class FedProx(Algorithm[FedProxParams]):
    """FedAvg with a proximal local objective."""

    member_params = ("mu",)   # a factor of ‖w − w_global‖² only

    def local_objective(self, state, batch, shared, hp, ctx):
        """f(w) + μ/2 ‖w − w_global‖²."""
        w = state["model"]
        return ctx.task_loss(w, batch) + self.params.mu / 2 * sq_dist(w, shared["global"])
