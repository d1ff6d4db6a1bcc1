"""APFL (Deng et al., 2020): each client keeps a local model v and a mixing weight α; its
personalized model is the mixture v̄ = α·v + (1 − α)·w. Per step, w takes a FedAvg step on
f(w), v a step on f(v̄) (w held fixed inside the mixture), and — when adaptive — α a step on
∂f(v̄)/∂α = ⟨∇f(v̄), v − w⟩. α is clipped to [0, 1] where it is used.
"""

import torch

from pflpipe.algorithms.base import Algorithm, Phase, register
from pflpipe.spec.algorithms import ApflParams


@register
class Apfl(Algorithm[ApflParams]):
    """Adaptive personalized FL: a learned mixture of local and global models."""

    kept = ("personal", "alpha")

    def init_kept(self, global_params):
        """V starts as the global model, α at its configured value."""
        return {"personal": dict(global_params), "alpha": {"value": torch.tensor(self.params.alpha)}}

    def phases(self):
        """One phase training w and v (and α when adaptive) together."""
        if not self.params.adaptive:
            return (Phase(train=("model", "personal")),)
        return (Phase(train=("model", "personal", "alpha"),
                      group_lr={"alpha": self.params.alpha_lr or self.lr}),)

    def local_objective(self, state, batch, shared, hp, ctx):
        """f(w) + f(α·v + (1 − α)·sg(w)): each gradient lands where APFL applies it."""
        w = state["model"]
        mixed = self._mix(state, {k: value.detach() for k, value in w.items()})
        return ctx.task_loss(w, batch) + ctx.task_loss(mixed, batch)

    def personalized(self, state, shared):
        """The mixture v̄ = α·v + (1 − α)·w."""
        return self._mix(state, state["model"])

    def _mix(self, state, w):
        alpha = state["alpha"]["value"].clamp(0.0, 1.0)
        return {k: alpha * v + (1 - alpha) * w[k] for k, v in state["personal"].items()}
