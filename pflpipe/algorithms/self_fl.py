"""Self-FL (Chen et al., NeurIPS 2022): personalization from inter- and intra-client uncertainty.

Two-level model θ_m ~ N(θ₀, σ₀²), client estimate z_m ~ N(θ_m, σ_m²): ℓ_m gradient steps on client
m's negative log-likelihood from the leave-one-out start reach the paper's FL-optimal θ_m^(FL)
(Eqn. 3; not the model's posterior mean E[θ_m | z], see `pflpipe.engine.two_level`).
With w_k = (σ₀² + σ_k²)⁻¹ and S_{−m} = Σ_{k≠m} w_k, each round (Algorithm 1):
- start (Eqn. 10): θ_m^INIT = θ − (w_m / S_{−m})·(θ_m − θ), θ_m the client's last personal model;
- steps (Eqn. 8): (1 − a_m)^ℓ_m = S_{−m} / (σ_m⁻² + S_{−m}), ℓ_m = ⌈·⌉ clipped to [1, ℓ_max], with
  a_m = η/(N_m σ_m²) on the engine's batch-mean loss (η/σ_m² on Eqn. 5's summed NLL,
  `loss_reduction`; the derivation is `two_level.local_steps`'s);
- server (Eqn. 11): θ̂ = Σ w_m θ_m^t / Σ w_m, then θ ← (1 − C)·θ + C·θ̂ at activity rate C.
σ̂_m² is the empirical variance (trace, 1/n) of the client's personal models over its previous
participations (Welford, kept per client); σ̂₀² that of the round's personal models. Clients with
fewer than `min_history` participations start from θ with FedAvg's steps and borrow the mean σ̂².
Algorithm 2 (`augmented`) takes both variances from local optima trained further each round.
"""

import torch

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.engine.tree import weighted_mean
from pflpipe.engine.two_level import EPS, local_steps
from pflpipe.spec.algorithms.self_fl_params import SelfFLParams


def _spread(group, mean):
    """Σ over keys of ‖group[k] − mean[k]‖² per member [C] (group [C, ...], mean [...])."""
    return sum(((v - mean[k]) ** 2).flatten(1).sum(1) for k, v in group.items())


@register
class SelfFL(Algorithm[SelfFLParams]):
    """Leave-one-out start, uncertainty-driven local steps and precision-weighted aggregation."""

    kept = ("uncertainty",)   # the Welford accumulator over the client's personal models

    @property
    def _source(self) -> str:
        """The group whose spread estimates the variances (Alg. 2: the local optimum)."""
        return "optimum" if self.params.augmented else "model"

    # ---- server side ----------------------------------------------------------------------
    def init_server(self, global_params, n_clients):
        """σ̂₀² = 0 and every client's σ̂_k² unknown."""
        zero = torch.zeros((), dtype=next(iter(global_params.values())).dtype)
        return {"uncertainty": {"sigma0_sq": zero, "sigma_sq": zero.repeat(n_clients),
                                "known": zero.repeat(n_clients)}}

    def dispatch(self, round):
        """Eqn. 10 for the clients with a variance; the global model for the others."""
        if self.params.init == "global":
            return None
        _, w, s_minus, ready, _ = self._peers(round, self._sigma0_sq(round), False)
        seen = round.states["uncertainty"]["count"] > 0
        shift = torch.where(ready, w / s_minus.clamp_min(EPS), 0.0)
        out = {}
        for key, g in round.global_params.items():
            last = torch.where(seen.view(-1, *[1] * g.dim()), round.states["model"][key], g)
            out[key] = g - shift.view(-1, *[1] * g.dim()) * (last - g)
        return out

    def schedule(self, round, phase, steps, lr):
        """ℓ_m of Eqn. 8 in the main phase (`local_steps`), capped by `max_local_steps`."""
        if self.params.steps == "fixed" or "model" not in phase.train:
            return steps, lr
        ell, ready = self._steps(round, lr, False)
        return torch.where(ready.cpu(), ell.cpu(), steps), lr

    def _steps(self, round, lr, after_training):
        """ℓ_m [C] from Eqn. 8 and whether it applies [C] (else FedAvg's steps are taken)."""
        s2, _, s_minus, ready, _ = self._peers(round, self._sigma0_sq(round), after_training)
        n = round.counts if self.params.loss_reduction == "mean" else torch.ones_like(round.counts)
        return local_steps(lr.to(s2), s2, s_minus, n.to(s2), self.params.max_local_steps), ready

    def server_diagnostics(self, round, server):
        """ℓ_m (NaN where Eqn. 8 did not apply), σ̂_m² used, aggregation weight, σ̂₀² [C]."""
        s2 = self._peers(round, self._sigma0_sq(round), True)[0]
        sigma0_sq = server["uncertainty"]["sigma0_sq"]
        out = {"sigma_sq": s2, "weight": self._weights(round, sigma0_sq),
               "sigma0_sq": sigma0_sq.expand(len(round.clients))}
        if self.params.steps == "adaptive":
            ell, ready = self._steps(round, torch.full_like(s2, self.lr), True)
            out["local_steps"] = torch.where(ready, ell.to(s2), float("nan"))
        return out

    def _weights(self, round, sigma0_sq):
        """The aggregation weights [C]: Eqn. 11's w_m / Σ w_m, or FedAvg's n_m / n."""
        if self.params.aggregation != "uncertainty":
            return round.weights
        w = self._peers(round, sigma0_sq, True)[1]
        return w / w.sum()

    def server_step(self, round):
        """σ̂₀² of the round, Eqn. 11 weights, the smoothed global model and the σ̂_k² table."""
        p = self.params
        upload = round.states[self._source]
        mean = {k: v.mean(0) for k, v in upload.items()}
        sigma0_sq = (_spread(upload, mean).mean() if len(round.clients) > 1 and p.oracle is None
                     else self._sigma0_sq(round))
        table = self._peers(round, sigma0_sq, True)[4]
        weights = self._weights(round, sigma0_sq)
        payloads = {k: v for k, v in round.states["model"].items() if self.is_payload(k)}
        rate = len(round.clients) / round.n_clients if p.smoothing else 1.0
        new = {k: (1 - rate) * round.global_params[k] + rate * v
               for k, v in weighted_mean(payloads, weights).items()}
        return new, {"uncertainty": {"sigma0_sq": sigma0_sq, "sigma_sq": table[0],
                                     "known": table[1]}}

    def _sigma0_sq(self, round):
        """σ̂₀² of the previous round (the known σ₀² with oracle variances)."""
        before = round.server["uncertainty"]["sigma0_sq"]
        oracle = self.params.oracle
        return before if oracle is None else before.new_tensor(oracle.sigma0_sq)

    def _intra(self, round, after_training):
        """σ̂_m² [C] of the round's clients before their training, and whether it is known."""
        if self.params.oracle is not None:
            dtype = next(iter(round.global_params.values())).dtype
            s2 = self.params.oracle.sigma_sq / round.counts.to(dtype)
            return s2, torch.ones_like(s2, dtype=torch.bool)
        stats = round.states["uncertainty"]
        if after_training:
            return stats["reported"], stats["count"] - 1 >= self.params.min_history
        return stats["var"], stats["count"] >= self.params.min_history

    def _peers(self, round, sigma0_sq, after_training):
        """The round's σ̂_m², w_m, S_{−m}, readiness [C] and the latest σ̂_k² table [M].

        A client is ready (follows Self-FL's rules, else FedAvg's) once its σ̂_m² is known; unknown
        σ̂² (too short a history) are imputed by the mean of the peers' known ones. The table holds
        every client's latest (σ̂_k², known), this round's written in.
        """
        s2, known = self._intra(round, after_training)
        before = round.server["uncertainty"]
        mine = round.clients.view(-1, 1) == torch.arange(round.n_clients, device=s2.device)
        mine = (mine & known.view(-1, 1)).to(s2)
        written = mine.sum(0) > 0
        table = (torch.where(written, s2 @ mine, before["sigma_sq"]),
                 torch.where(written, 1.0, before["known"]))
        peers, peer_known = table if self.params.peer_set == "all" else (s2, known.to(s2))
        fill = (peers * peer_known).sum() / peer_known.sum().clamp_min(1)
        w = 1 / (sigma0_sq + torch.where(known, s2, fill) + EPS)
        s_minus = (1 / (sigma0_sq + torch.where(peer_known > 0, peers, fill) + EPS)).sum() - w
        ready = known if len(peers) > 1 else torch.zeros_like(known)
        return s2, w, s_minus, ready, table

    # ---- client side ------------------------------------------------------------------------
    def init_kept(self, global_params):
        """An empty Welford accumulator over the client's personal models."""
        zero = torch.zeros((), dtype=next(iter(global_params.values())).dtype)
        return {"uncertainty": {"count": zero, "var": zero, "reported": zero,
                                **{f"mean.{k}": torch.zeros_like(v)
                                   for k, v in global_params.items()}}}

    def fresh(self, state, shared):
        """Alg. 2's local optimum starts the round where the personal model does."""
        return {"optimum": dict(state["model"])} if self.params.augmented else {}

    def phases(self):
        """ℓ_m steps (Alg. 2: on the local optimum too, then `augmented_epochs` more on it)."""
        if not self.params.augmented:
            return (Phase(),)
        return (Phase(train=("model", "optimum")),
                Phase(train=("optimum",), objective=self.optimum_objective,
                      epochs=self.params.augmented_epochs))

    def local_objective(self, state, batch, shared, hp, ctx):
        """The task loss of the personal model (and of Alg. 2's local optimum alongside)."""
        loss = ctx.task_loss(state["model"], batch)
        return loss + ctx.task_loss(state["optimum"], batch) if self.params.augmented else loss

    def optimum_objective(self, state, batch, shared, hp, ctx):
        """The task loss of Alg. 2's local optimum."""
        return ctx.task_loss(state["optimum"], batch)

    def finish(self, start, trained, shared):
        """Welford update of the client's variance with this round's personal model."""
        stats, x = start["uncertainty"], trained[self._source]
        n = stats["count"] + 1
        mean = {k: stats[f"mean.{k}"] + (v - stats[f"mean.{k}"]) / n for k, v in x.items()}
        cross = sum(((v - stats[f"mean.{k}"]) * (v - mean[k])).sum() for k, v in x.items())
        return {**trained, "uncertainty": {
            "count": n, "var": ((n - 1) * stats["var"] + cross) / n, "reported": stats["var"],
            **{f"mean.{k}": v for k, v in mean.items()}}}

    def personalized(self, state, shared):
        """The client's last personal model; the global model before it first trains."""
        seen = state["uncertainty"]["count"] > 0
        return {k: torch.where(seen, v, shared["global"][k]) for k, v in state["model"].items()}

