"""pFedMe (Dinh et al., NeurIPS 2020): personalized models via Moreau envelopes.

On each mini-batch a client approximately solves θ̃ = argmin_θ f(θ) + λ/2 ‖θ − w‖² with K gradient
steps of size `personal_lr` (warm-started from the previous θ̃ of the round), then moves its local
w by w ← w − η·λ·(w − θ̃), the gradient of the envelope. The server mixes
w ← (1 − β)·w + β·mean_k(w_k). θ̃ is the personalized model.

Cost: each inner step differentiates only f and adds the proximal term's gradient λ(θ − w) in
closed form, in two passes over θ (through autograd, the proximal term cost about as much as f's
gradient for an MLP: benchmarks/pfedme.py).
"""

import torch

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.engine.tree import sq_dist
from pflpipe.spec.algorithms.pfedme_params import PFedMeParams


@register
class PFedMe(Algorithm[PFedMeParams]):
    """Bi-level optimisation with a Moreau-envelope regulariser."""

    predict_with = "personal"
    member_params = ("beta",)  # the server's mixing only (λ meets η before any tensor)

    def fresh(self, state, shared):
        """θ starts the round at the global model, as w does."""
        return {"personal": dict(state["model"])}

    def local_objective(self, state, batch, shared, hp, ctx):
        """λ/2 ‖w − sg(θ̃)‖², whose gradient λ(w − θ̃) is the envelope's; θ̃ is kept."""
        p = self.params
        w = {k: value.detach() for k, value in state["model"].items()}
        task_grad = torch.func.grad(ctx.task_loss)
        eta, lam = p.personal_lr, p.lam
        pull = {k: (eta * lam) * value for k, value in w.items()}  # ηλw, the same every step
        theta = state["personal"]
        for _ in range(p.inner_steps):  # θ ← θ − η(∇f(θ) + λ(θ − w)) = (1 − ηλ)θ + ηλw − η∇f(θ)
            grads = task_grad(theta, batch)
            theta = {k: torch.add(pull[k], grads[k], alpha=-eta).add_(theta[k], alpha=1 - eta * lam)
                     for k in theta}
        theta = {k: value.detach() for k, value in theta.items()}
        return p.lam / 2 * sq_dist(state["model"], theta), {"personal": theta}

    def diagnostics(self, state, shared, batch, ctx):
        """‖θ̃ − w‖: the personalized model's distance to the global model the round began at."""
        return {"personal_distance": sq_dist(state["personal"], shared["global"]).sqrt()}

    def aggregate(self, global_params, payloads, weights):
        """W ← (1 − β)·w + β·Σ_k (n_k / n)·w_k."""
        mean = super().aggregate(global_params, payloads, weights)
        beta = self.params.beta
        return {k: (1 - beta) * global_params[k] + beta * mean[k] for k in mean}
