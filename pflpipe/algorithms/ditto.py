"""Ditto (Li et al., ICML 2021): FedAvg, plus a personal model v per client.

v is trained on task_loss(v) + λ/2 ‖v − w‖² with w the global model the client received this
round. v is never sent; v is scored.
"""

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.engine.tree import sq_dist
from pflpipe.spec.algorithms.ditto_params import DittoParams


@register
class Ditto(Algorithm[DittoParams]):
    """Global model by FedAvg steps; personal model by proximal steps towards it."""

    kept = ("personal",)
    predict_with = "personal"
    member_params = ("lam",)   # a factor of ‖v − w‖² only

    def init_kept(self, global_params):
        """V starts as the starting global model."""
        return {"personal": dict(global_params)}

    def phases(self):
        """FedAvg's local epochs on w, then `personal_epochs` on v."""
        return (Phase(), Phase(train=("personal",), objective=self.personal_objective,
                               epochs=self.params.personal_epochs))

    def diagnostics(self, state, shared, batch, ctx):
        """‖v − w‖: the trained personal model's distance to the global model it received."""
        return {"personal_distance": sq_dist(state["personal"], shared["global"]).sqrt()}

    def personal_objective(self, state, batch, shared, hp, ctx):
        """task_loss(v) + λ/2 ‖v − w‖²."""
        v = state["personal"]
        return ctx.task_loss(v, batch) + self.params.lam / 2 * sq_dist(v, shared["global"])
