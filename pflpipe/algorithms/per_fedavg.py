"""Per-FedAvg (Fallah et al., NeurIPS 2020): MAML-style FedAvg.

Each local step draws two mini-batches D, D′ (three for the Hessian-free variant, D″): the
adapted point is w̃ = w − α∇f(w; D), and w moves by β times
  FO: ∇f(w̃; D′)
  HF: ∇f(w̃; D′) − α·H(w; D″)∇f(w̃; D′), the Hessian-vector product by central differences
      [∇f(w + δd; D″) − ∇f(w − δd; D″)] / 2δ with d = ∇f(w̃; D′).
A client is scored after `adapt_steps` plain steps of size α from the global model. α and β
default to the entry's lr.
"""

import torch

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.engine.protocol import task_objective
from pflpipe.engine.trainer import sub_batch
from pflpipe.spec.algorithms.per_fedavg_params import PerFedAvgParams


def _detached(params):
    return {k: value.detach() for k, value in params.items()}


@register
class PerFedAvg(Algorithm[PerFedAvgParams]):
    """Meta-learn an initialisation that one step of size α personalizes."""

    def phases(self):
        """Local meta-steps of size β, each drawing 2 (FO) or 3 (HF) mini-batches."""
        draws = 2 if self.params.variant == "first_order" else 3
        return (Phase(batches_per_step=draws, lr=self.params.beta or self.lr),)

    def eval_phases(self):
        """Adaptation from the global model before scoring."""
        return (Phase(objective=task_objective, steps=self.params.adapt_steps,
                      lr=self._alpha),)

    def local_objective(self, state, batch, shared, hp, ctx):
        """A loss whose gradient in w is the FO or HF meta-gradient."""
        p, w, alpha = self.params, state["model"], self._alpha
        grad = torch.func.grad(ctx.task_loss)
        inner = grad(_detached(w), sub_batch(batch, 0))
        adapted = {k: w[k] - alpha * inner[k] for k in w}   # gradient flows to w unchanged
        if p.variant == "first_order":
            return ctx.task_loss(adapted, sub_batch(batch, 1))
        direction = grad(_detached(adapted), sub_batch(batch, 1))
        third = sub_batch(batch, 2)
        plus = grad({k: w[k].detach() + p.delta * direction[k] for k in w}, third)
        minus = grad({k: w[k].detach() - p.delta * direction[k] for k in w}, third)
        meta = {k: direction[k] - alpha * (plus[k] - minus[k]) / (2 * p.delta) for k in w}
        return sum((w[k] * meta[k].detach()).sum() for k in w)

    @property
    def _alpha(self) -> float:
        return self.params.alpha or self.lr

    def personalized(self, state, shared):
        """The adapted model: `state` is the global model after the `eval_phases` steps."""
        return state["model"]
