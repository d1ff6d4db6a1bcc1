"""APFL (Deng et al., 2020): a per-client mixture of a local and the global model.

Each client keeps a local model v and a mixing weight α; its personalized model is the mixture
v̄ = α·v + (1 − α)·w. Per step, w takes a FedAvg step on f(w), v a step on f(v̄) (w held fixed
inside the mixture), and — when adaptive — α a projected gradient step
α ← Π_[0,1](α − η_α·⟨∇f(v̄), v − w⟩), where ⟨∇f(v̄), v − w⟩ = ∂f(v̄)/∂α.
"""

import torch

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.spec.algorithms.apfl_params import ApflParams


def _detached(params):
    return {k: value.detach() for k, value in params.items()}


@register
class Apfl(Algorithm[ApflParams]):
    """Adaptive personalized FL: a learned mixture of local and global models."""

    kept = ("personal", "alpha")
    member_params = ("alpha",)  # the initial α only

    def init_kept(self, global_params):
        """V starts as the global model, α at its configured value."""
        return {"personal": dict(global_params),
                "alpha": {"value": torch.tensor(self.params.alpha)}}

    def phases(self):
        """One phase training w and v together (α moves by its own projected step)."""
        return (Phase(train=("model", "personal")),)

    def local_objective(self, state, batch, shared, hp, ctx):
        """Return f(w) + f(α·v + (1 − α)·sg(w)), whose gradients land where APFL applies them.

        Adaptive α is returned already stepped and projected onto [0, 1]: a gradient step through
        a clamp would leave α stuck once it crossed a bound, and the local optimizer would add
        momentum or weight decay to it.
        """
        w = state["model"]
        mixed = self._mix(state, _detached(w))
        loss = ctx.task_loss(w, batch) + ctx.task_loss(mixed, batch)
        if not self.params.adaptive:
            return loss
        grad = torch.func.grad(ctx.task_loss)(_detached(mixed), batch)
        slope = sum((grad[k] * (state["personal"][k] - w[k]).detach()).sum() for k in grad)
        alpha = state["alpha"]["value"] - (self.params.alpha_lr or self.lr) * slope
        return loss, {"alpha": {"value": alpha.clamp(0.0, 1.0)}}

    def diagnostics(self, state, shared, batch, ctx):
        """α after the round's local training."""
        return {"alpha": state["alpha"]["value"]}

    def personalized(self, state, shared):
        """The mixture v̄ = α·v + (1 − α)·w."""
        return self._mix(state, state["model"])

    def _mix(self, state, w):
        alpha = state["alpha"]["value"]
        return {k: alpha * v + (1 - alpha) * w[k] for k, v in state["personal"].items()}
