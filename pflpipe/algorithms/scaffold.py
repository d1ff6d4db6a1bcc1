"""SCAFFOLD (Karimireddy et al., ICML 2020): stochastic controlled averaging.

The server keeps a control variate c, each client its own c_i (both start at 0). A client's local
steps follow the corrected gradient g_i(y) − c_i + c, the gradient of f_i(y) + ⟨c − c_i, y⟩ with
the controls held fixed. After its K local steps it sets c_i⁺ to the mean of the gradients
g_i(y_t) it actually took (summed at every step), and uploads y and Δc_i = c_i⁺ − c_i. Under
plain SGD of step η this is the paper's option II, c_i − c + (x − y)/(Kη); unlike option II it
stays the mean gradient under SGD momentum and Adam, whose step is not η·(corrected gradient).
The server moves x ← x + η_g·(Σ_i (n_i/n)·y_i − x) and c ← c + (|S|/N)·mean_i Δc_i.
"""

import torch
from torch.func import grad_and_value

from pflpipe.algorithms.algorithm import Algorithm, register
from pflpipe.engine.tree import weighted_mean
from pflpipe.spec.algorithms.scaffold_params import ScaffoldParams


def _norm(group):
    return sum((value.double() ** 2).sum() for value in group.values()).sqrt()


def _zeros(group):
    return {key: torch.zeros_like(value) for key, value in group.items()}


@register
class Scaffold(Algorithm[ScaffoldParams]):
    """FedAvg with client and server control variates."""

    kept = ("control", "steps", "gradients")   # c_i; K and Σ_t g_i(y_t) of the round
    member_params = ("server_lr",)   # the server step only

    def init_server(self, global_params, n_clients):
        """C = 0."""
        return {"control": _zeros(global_params)}

    def init_kept(self, global_params):
        """c_i = 0, K = 0, Σg = 0."""
        return {"control": _zeros(global_params), "steps": {"count": torch.zeros(())},
                "gradients": _zeros(global_params)}

    def local_objective(self, state, batch, shared, hp, ctx):
        """f_i(y) + ⟨c − c_i, y⟩; one more step counted (K) and its g_i(y) summed.

        g_i(y) is taken once, inside; the returned loss has the value f_i(y) and the gradient
        g_i(y) + c − c_i, so the step costs one backward pass as before.
        """
        y, c, c_i = state["model"], shared["server"]["control"], state["control"]
        g, value = grad_and_value(lambda p: ctx.task_loss(p, batch))(y)
        surrogate = sum(((g[k] + c[k] - c_i[k]).detach() * (y[k] - y[k].detach())).sum()
                        for k in y)
        total = state["gradients"]
        return value.detach() + surrogate, {
            "steps": {"count": state["steps"]["count"] + 1},
            "gradients": {k: total[k] + g[k].detach() for k in total}}

    def finish(self, start, trained, shared):
        """c_i⁺ = Σg / K (kept when K = 0), Δc_i for the server, K and Σg back to 0."""
        c_i, count = start["control"], trained["steps"]["count"]
        total = trained["gradients"]
        new = {k: torch.where(count > 0, total[k] / count.clamp_min(1), c_i[k]) for k in c_i}
        return {**trained, "control": new,
                "control_delta": {k: new[k] - c_i[k] for k in new},
                "steps": {"count": torch.zeros_like(count)}, "gradients": _zeros(total)}

    def diagnostics(self, state, shared, batch, ctx):
        """‖c_i‖ after the round (the mean gradient it took)."""
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
