"""SCAFFOLD (Karimireddy et al., ICML 2020): stochastic controlled averaging.

The server keeps a control variate c, each client its own c_i (both start at 0). A client's local
steps follow the corrected gradient g_i(y) − c_i + c, the gradient of f_i(y) + ⟨c − c_i, y⟩ with
the controls held fixed. After K steps of size η from the global x, it updates its control by
option II, c_i⁺ = c_i − c + (x − y)/(Kη), and uploads y and Δc_i = c_i⁺ − c_i. The server moves
x ← x + η_g·(Σ_i (n_i/n)·y_i − x) and c ← c + (|S|/N)·mean_i Δc_i.
"""

import torch

from pflpipe.algorithms.base import Algorithm, register
from pflpipe.engine.tree import weighted_mean
from pflpipe.spec.algorithms.scaffold import ScaffoldParams


def _norm(group):
    return sum((value.double() ** 2).sum() for value in group.values()).sqrt()


def _zeros(group):
    return {key: torch.zeros_like(value) for key, value in group.items()}


@register
class Scaffold(Algorithm[ScaffoldParams]):
    """FedAvg with client and server control variates."""

    kept = ("control", "steps")   # c_i, and the round's local step count K

    def init_server(self, global_params, n_clients):
        """C = 0."""
        return {"control": _zeros(global_params)}

    def init_kept(self, global_params):
        """c_i = 0, K = 0."""
        return {"control": _zeros(global_params), "steps": {"count": torch.zeros(())}}

    def local_objective(self, state, batch, shared, hp, ctx):
        """f_i(y) + ⟨c − c_i, y⟩, and one more local step counted (K)."""
        y, c, c_i = state["model"], shared["server"]["control"], state["control"]
        correction = sum(((c[k] - c_i[k]).detach() * y[k]).sum() for k in y)
        steps = {"count": state["steps"]["count"] + 1}
        return ctx.task_loss(y, batch) + correction, {"steps": steps}

    def finish(self, start, trained, shared):
        """c_i⁺ = c_i − c + (x − y)/(Kη), Δc_i for the server, and K back to 0."""
        x, y, c_i = start["model"], trained["model"], start["control"]
        c = shared["server"]["control"]
        k_eta = trained["steps"]["count"].clamp_min(1) * self.lr
        new = {k: c_i[k] - c[k] + (x[k] - y[k]) / k_eta for k in c_i}
        return {**trained, "control": new,
                "control_delta": {k: new[k] - c_i[k] for k in new},
                "steps": {"count": torch.zeros_like(trained["steps"]["count"])}}

    def diagnostics(self, state, shared, batch, ctx):
        """‖c_i‖ after the round (option II's update)."""
        return {"client_control_norm": _norm(state["control"])}

    def server_diagnostics(self, round, server):
        """‖c‖ after the round's server step (the same for every client of the round)."""
        return {"control_norm": _norm(server["control"]).expand(len(round.clients))}

    def server_step(self, round):
        """X ← x + η_g(mean_n(y) − x); c ← c + (|S|/N)·mean(Δc)."""
        mean, _ = super().server_step(round)
        x, eta_g = round.global_params, self.params.server_lr
        uniform = torch.full_like(round.weights, 1.0 / len(round.clients))
        delta = weighted_mean(round.states["control_delta"], uniform)
        share = len(round.clients) / round.n_clients
        control = {k: v + share * delta[k] for k, v in round.server["control"].items()}
        return {k: x[k] + eta_g * (mean[k] - x[k]) for k in mean}, {"control": control}
