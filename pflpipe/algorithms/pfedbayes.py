"""pFedBayes (Zhang et al., ICML 2022): personalized FL by variational Bayesian inference.

Every weight is Gaussian (σ = softplus(π)). The server holds a global distribution
q_v = N(μ_v, diag σ_v²) (μ_v is the global model, π_v the server state ``spread``); client i keeps a
personal q_θ and each round trains a copy of q_v. Each local step (full batch, pFedVEM's setting)
minimises, with K reparameterised draws and n the client's samples,

    q_θ:  (1/K) Σ_k (1/n) Σ_j ℓ_j(w_k) + (ζ/n) KL(q_θ ‖ q_v)     with q_v held fixed,
    q_v:  (ζ/n) KL(q_θ ‖ q_v)                                   with q_θ held fixed,

(the negative ELBO over n, so that lr is on the scale of a mean loss; every σ kept within
[min_std, max_std]) as one objective whose
gradients land where pFedBayes applies them (the two updates are simultaneous here, one after the
other in the paper's Algorithm 1), by Adam with separate personal and global learning rates as
the paper's code (plain SGD diverges on small clients: the KL's curvature ζ/(n·σ²) reaches 10⁴
at n = 4, σ = 0.05). The server mixes
v ← (1 − β)·v + β·(1/S) Σ_i v_i over the round's S clients, means and spreads alike (uniform
weights, as the paper). The personalized model is q_θ's mean (or its MC predictive), the global
model q_v's mean.
"""

from pflpipe.algorithms import bayesian
from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.spec.algorithms.pfedbayes_params import PFedBayesParams


@register
class PFedBayes(Algorithm[PFedBayesParams]):
    """Bayesian personal networks tied by a KL term to a Bayesian global network."""

    kept = ("personal", "personal_spread")
    predict_with = "personal"

    def init_server(self, global_params, n_clients):
        """The global spread: σ₀ everywhere."""
        return {"spread": bayesian.constant_spread(global_params, self.params.init_std)}

    def init_kept(self, global_params):
        """q_θ starts as the global mean with σ₀ everywhere."""
        return {"personal": dict(global_params),
                "personal_spread": bayesian.constant_spread(global_params, self.params.init_std)}

    def fresh(self, state, shared):
        """The spread of the copy of q_v (its mean is ``model``)."""
        return {"spread": shared["server"]["spread"]}

    def phases(self):
        """Local epochs of full-batch steps on q_θ and the copy of q_v together."""
        p = self.params
        personal, global_ = p.learning_rates()
        return (Phase(train=("personal", "personal_spread", "model", "spread"), full_batch=True,
                      lr=personal, group_lr={"model": global_, "spread": global_},
                      optimizer="adam" if p.optimizer == "adam" else None),)

    def local_objective(self, state, batch, shared, hp, ctx):
        """(1/K) Σ_k f(w_k) + (ζ/n)·[KL(q_θ ‖ sg q_v) + KL(sg q_θ ‖ q_v)]."""
        p = self.params
        personal, personal_std = state["personal"], bayesian.std(state["personal_spread"],
                                                                  p.std_bounds)
        mean, spread_std = state["model"], bayesian.std(state["spread"], p.std_bounds)
        nll = bayesian.expected_loss(ctx, {}, personal, state["personal_spread"], batch,
                                     p.mc_samples)
        to_personal = bayesian.gaussian_kl(personal, personal_std, bayesian.detached(mean),
                                           bayesian.detached(spread_std))
        to_global = bayesian.gaussian_kl(bayesian.detached(personal),
                                         bayesian.detached(personal_std), mean, spread_std)
        return nll + p.zeta / batch["mask"].sum() * (to_personal + to_global)

    def server_step(self, round):
        """Mix the global mean and spread with the round's uniform mean by β."""
        beta = self.params.beta

        def mix(old, stacked):
            return {k: (1 - beta) * old[k] + beta * stacked[k].mean(0) for k in stacked}

        spread = mix(round.server["spread"], round.states["spread"])
        return (mix(round.global_params, round.states["model"]),
                {**round.server, "spread": spread})

    def scored(self, state, shared):
        """q_θ: its mean network and its spread."""
        return {"model": state["personal"], "spread": state["personal_spread"]}

    def predict(self, model, x, ctx, key):
        """The posterior-mean network or the MC predictive (`predict`)."""
        return bayesian.predict(ctx, model, x, key, self.params.predict, self.params.mc_samples)
