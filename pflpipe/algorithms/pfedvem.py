"""pFedVEM (Zhu, Ma & Blaschko, CVPR 2023): confidence-aware personalized FL by variational EM.

Client j's head is a diagonal Gaussian q_j = N(μ_j, diag σ_j²) (groups ``mean`` and ``spread``,
σ = softplus(π)) under the prior w_j ~ N(w, ρ_j² I) around the global head w; the base θ is
deterministic. A round:

1. on receiving w, the client's confidence τ_j = 1/ρ_j² = d / (tr Σ_j + ‖μ_j − w‖²) (Eq. 8, from
   its posterior of the previous round: the paper's order);
2. E-step: `head_steps` full-batch steps on the negative ELBO
   (1/K) Σ_k Σ_i ℓ(x_i, y_i; μ_j + σ_j ⊙ ε_k) + KL(q_j ‖ N(w, τ_j⁻¹ I)), K reparameterised draws;
3. the base: FedAvg's local epochs on E_q[f(θ)], K draws of the frozen head;
4. server, over the clients S_t whose update arrives: w = Σ τ_j μ_j / Σ τ_j (Eq. 9) and
   θ = Σ n_j θ_j / Σ n_j.

The personalized model is the client's base with its posterior-mean head (or the MC predictive);
the global model is (θ, w). The ablations of Tables 2-3 keep one term of τ_j.
"""

import numpy as np
import torch
from torch.nn import functional as F

from pflpipe.algorithms import bayesian
from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.engine.tree import weighted_mean
from pflpipe.errors import SpecError
from pflpipe.spec.algorithms.pfedvem_params import PFedVemParams


@register
class PFedVem(Algorithm[PFedVemParams]):
    """Bayesian heads by variational EM; the global head weighted by each client's confidence."""

    kept = ("mean", "spread")

    def init_kept(self, global_params):
        """μ_j⁰ = w⁰ and σ_j⁰ = √init_var for every head weight."""
        head = self._head(global_params)
        if not head:
            raise SpecError("pfedvem needs a model head: the architecture declares none; name "
                            "its state-dict prefixes in model.head")
        return {"mean": head, "spread": bayesian.constant_spread(head, self.params.init_var ** 0.5)}

    def is_payload(self, key):
        """The base is averaged as in FedAvg; the head's mean reaches the server via τ."""
        return key not in self.head

    def fresh(self, state, shared):
        """The confidence τ_j of the kept posterior against the received w."""
        tau = self.confidence(state["mean"], state["spread"], self._head(shared["global"]))
        return {"tau": {"value": tau}}

    def confidence(self, mean, spread, w):
        """τ = d / (tr Σ + ‖μ − w‖²), or one term of it (`confidence`); computed in float64."""
        d = sum(value.numel() for value in mean.values())
        trace = sum((F.softplus(value.double()) ** 2).sum() for value in spread.values())
        deviation = sum(((mean[k].double() - w[k].double()) ** 2).sum() for k in mean)
        mode = self.params.confidence
        if mode == "uncertainty":
            denominator = trace
        elif mode == "deviation":  # μ = w (the first round): the full formula
            denominator = torch.where(deviation > 0, deviation, trace + deviation)
        else:
            denominator = trace + deviation
        return (d / denominator).to(next(iter(mean.values())).dtype)

    def diagnostics(self, state, shared, batch, ctx):
        """τ_j: the confidence the client's head entered this round with (Eq. 8)."""
        return {"tau": state["tau"]["value"]}

    def phases(self):
        """The E-step on the head (full batch), then FedAvg's local epochs on the base."""
        p = self.params
        return (Phase(train=("mean", "spread"), objective=self.elbo_objective, steps=p.head_steps,
                      lr=p.head_lr, full_batch=True),
                Phase(objective=self.base_objective))

    def elbo_objective(self, state, batch, shared, hp, ctx):
        """−ELBO = (1/K) Σ_k Σ_i ℓ_i(w_k) + KL(q ‖ N(w, τ⁻¹ I)) on the client's whole data."""
        n = batch["mask"].sum()
        nll = n * bayesian.expected_loss(ctx, state["model"], state["mean"], state["spread"],
                                         batch, self.params.mc_samples)
        kl = bayesian.gaussian_kl(state["mean"], bayesian.std(state["spread"]),
                                  self._head(shared["global"]), state["tau"]["value"].rsqrt())
        return nll + kl

    def base_objective(self, state, batch, shared, hp, ctx):
        """E_q[f(θ)] on a mini-batch, K draws of the frozen head."""
        return bayesian.expected_loss(ctx, state["model"], state["mean"], state["spread"], batch,
                                      self.params.mc_samples)

    def server_step(self, round):
        """θ: FedAvg over the arrived clients; w = Σ τ_j μ_j / Σ τ_j over them."""
        arrived = self.arrivals(round).to(round.states["tau"]["value"])
        counts = round.counts.to(arrived) * arrived
        tau = round.states["tau"]["value"] * arrived
        base = weighted_mean(round.states["model"], counts / counts.sum())
        return {**base, **weighted_mean(round.states["mean"], tau / tau.sum())}, round.server

    def arrivals(self, round):
        """Which of the round's clients reach the server [C] (bool).

        All of them when only a sampled share trained (`client_fraction` < 1); when every client
        did, each with probability s, redrawn from the round's seed until at least
        `min_participants` arrive.
        """
        p, count = self.params, len(round.clients)
        if count < round.n_clients:
            return torch.ones(count, dtype=torch.bool, device=round.clients.device)
        if p.min_participants > count:
            raise SpecError(f"pfedvem.min_participants = {p.min_participants} exceeds the "
                            f"{count} clients; lower it")
        rng = np.random.default_rng(round.seed)
        arrived = rng.random(count) < p.participation
        while arrived.sum() < p.min_participants:
            arrived = rng.random(count) < p.participation
        return torch.as_tensor(arrived, device=round.clients.device)

    def scored(self, state, shared):
        """The base (the client's or the global one, `pm_base`) with the posterior head."""
        base = state["model"] if self.params.pm_base == "local" else shared["global"]
        model = {k: state["mean"][k] if k in self.head else base[k] for k in shared["global"]}
        return {"model": model, "spread": state["spread"]}

    def predict(self, model, x, ctx, key):
        """The posterior-mean network or the MC predictive (`predict`)."""
        return bayesian.predict(ctx, model, x, key, self.params.predict, self.params.mc_samples)

    def _head(self, params):
        return {k: v for k, v in params.items() if k in self.head}
