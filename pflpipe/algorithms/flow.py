"""Flow (Panchal et al., NeurIPS 2023): per-instance routing between global and local layers.

Every routed layer k (each parametric layer of the model's `base`, then its `head`) exists as a
global copy (group ``model``, sent) and a local copy (``local``, recreated from the received
global model every round: Flow is stateless). A routing network ψ (``router``, sent) maps an
input x to per-layer probabilities π_g^k(x) = 1 − π_l^k(x), and layer k outputs
π_g^k(x)·G_k(z) + π_l^k(x)·L_k(z) before its activation, both copies reading the same mixed
input z (Eq. 3). Each round, on a fresh split of its training samples, a client
  1. fine-tunes the local layers on the first part (Eq. 1: the local model alone), then
  2. alternates, on each mini-batch of the second part, a step of ψ on
     CE(w_p(x)) + λ·mean_k −log(π_g^k(x)² + ε) (Eq. 4) and a step of the global layers
     (Eq. 5), the other groups fixed: by default on the global model's own CE, as the reference
     code (``global_update: standalone``); ``routed`` trains them on CE(w_p(x)), our reading
     of the paper's text, which starved them on digits (GA 28 %; docs/results.md).
The server averages the global layers and ψ (weights n_k / n). Training routes softly; the
personalized model is scored with hard routing (per layer the larger probability, ties to
global; both branches are computed and masked) and, as the view ``soft``, with soft routing
(Table 8). Before scoring, a client re-creates its personalized model from the current global
model and router by steps 1-2, sending nothing (``eval_personalization: full``).
"""

import math

import torch
from torch import nn
from torch.func import functional_call

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.engine.tree import weighted_mean
from pflpipe.spec.algorithms.flow_params import FlowParams, default_widths

EPS = 1e-6   # ε inside the regularizer's log (reference code)


def units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's layers in forward order with their state-dict prefixes: `base`'s, then `head`.

    The model's forward must be ``head(base(x))``; a `base` that is not an nn.Sequential is one
    layer.
    """
    base, head = getattr(model, "base", None), getattr(model, "head", None)
    if not isinstance(base, nn.Module) or not isinstance(head, nn.Module):
        raise ValueError(f"Flow routes the layers of a model with a `base` and a `head` submodule "
                         f"(forward = head(base(x))); {type(model).__name__} has "
                         f"{'no base' if not isinstance(base, nn.Module) else 'no head'}")
    layers = ([(f"base.{name}.", m) for name, m in base.named_children()]
              if isinstance(base, nn.Sequential) else [("base.", base)])
    return [*layers, ("head.", head)]


def routed_units(model: nn.Module) -> int:
    """K: the number of routed layers (the layers with parameters)."""
    return sum(any(True for _ in layer.parameters()) for _, layer in units(model))


def routed_forward(model: nn.Module, global_params, local_params, pi_global, x):
    """Outputs of the dynamic model: layer k mixes its two copies by `pi_global` [B, K]."""
    z, k = x, 0
    for prefix, layer in units(model):
        names = [name for name, _ in layer.named_parameters()]
        if not names:
            z = layer(z)
            continue
        g = functional_call(layer, {n: global_params[prefix + n] for n in names}, (z,))
        loc = functional_call(layer, {n: local_params[prefix + n] for n in names}, (z,))
        weight = pi_global[:, k].reshape(-1, *([1] * (g.dim() - 1)))
        z, k = weight * g + (1 - weight) * loc, k + 1
    return z


class Router(nn.Module):
    """Eq. 2: an MLP over the flattened input with an exit of 2 logits after each hidden layer.

    Exit k reads hidden layer k's pre-activation, as the reference code's CIFAR policy network
    (its EMNIST one reads dropout-then-ReLU of it); the last layer, on the ReLU of the last
    hidden layer, is the K-th exit. Outputs [B, K, 2] logits, column 0 the global route.
    """

    def __init__(self, in_features: int, widths: list[int]):
        super().__init__()
        sizes = [in_features, *widths]
        self.trunk = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, widths, strict=False))
        self.exits = nn.ModuleList(nn.Linear(w, 2) for w in widths)
        self.last = nn.Linear(sizes[-1], 2)

    def forward(self, x):
        """Return the routing logits [B, K, 2]."""
        h, logits = x.flatten(1), []
        for layer, exit_ in zip(self.trunk, self.exits, strict=True):
            pre = layer(h)
            logits.append(exit_(pre))
            h = torch.relu(pre)
        return torch.stack([*logits, self.last(h)], 1)


@register
class Flow(Algorithm[FlowParams]):
    """Per-instance routing between a global and a local copy of every layer."""

    views = ("soft",)

    def modules(self, in_shape, n_outputs, model=None):
        """The routing network ψ, one exit per routed layer of `model`."""
        k, features = routed_units(model), math.prod(in_shape)
        widths = self.params.router_widths
        if widths is None:
            widths = default_widths(features, sum(p.numel() for p in model.parameters()), k)
        if len(widths) != k - 1:
            raise ValueError(f"flow.router_widths: {len(widths)} width(s) given, but the model "
                             f"has {k} routed layers: give {k - 1}, or omit it")
        return {"router": Router(features, list(widths))}

    def fresh(self, state, shared):
        """The local copy starts at the received global model (stateless), ψ at the server's."""
        return {"local": dict(state["model"]), "router": dict(shared["server"]["router"])}

    def phases(self):
        """Local fine-tuning on the first part, then routing/global steps on the second."""
        p = self.params
        return (Phase(train=("local",), epochs=p.local_epochs_first,
                      part=(0.0, p.split)),
                Phase(train=("router",), objective=self.router_objective, part=(p.split, 1.0),
                      then=((self.global_objective, ("model",)),)))

    def eval_phases(self):
        """Re-create the personalized model before scoring (nothing is sent)."""
        return self.phases() if self.params.eval_personalization == "full" else ()

    def local_objective(self, state, batch, shared, hp, ctx):
        """Eq. 1: the task loss of the local layers alone."""
        return ctx.task_loss(state["local"], batch)

    def router_objective(self, state, batch, shared, hp, ctx):
        """Eq. 4: CE of the soft-routed model + λ·mean −log(π² + ε) of the target route."""
        pi = self.route(state["router"], batch["x"], ctx)
        loss = ctx.loss(routed_forward(ctx.model, state["model"], state["local"], pi,
                                       batch["x"]), batch)
        target = self.params.reg_target
        if target == "none":
            return loss
        prob = pi if target == "global" else 1 - pi
        per_sample = -torch.log(prob ** 2 + EPS).mean(-1)
        mask = batch["mask"]
        return loss + self.params.lam * (per_sample * mask).sum() / mask.sum().clamp_min(1.0)

    def global_objective(self, state, batch, shared, hp, ctx):
        """Eq. 5: CE of the routed model (or of the global model alone) in the global layers."""
        if self.params.global_update == "standalone":
            return ctx.task_loss(state["model"], batch)
        pi = self.route(state["router"], batch["x"], ctx)
        return ctx.loss(routed_forward(ctx.model, state["model"], state["local"], pi,
                                       batch["x"]), batch)

    def server_step(self, round):
        """FedAvg of the global layers, and of ψ into the server state."""
        new_global, server = super().server_step(round)
        return new_global, {**server, "router": weighted_mean(round.states["router"],
                                                              round.weights)}

    def scored(self, state, shared):
        """Both copies of every layer and the router."""
        return {"model": state["model"], "local": state["local"], "router": state["router"]}

    def predict(self, model, x, ctx, key, view=""):
        """Hard routing (per layer the likelier copy, ties to global); ``soft``: the mixture."""
        pi = self.route(model["router"], x, ctx)
        if view != "soft":
            pi = (pi >= 0.5).to(pi.dtype)
        return routed_forward(ctx.model, model["model"], model["local"], pi, x)

    def diagnostics(self, state, shared, batch, ctx):
        """Per routed layer k (``.k``): the mean π_g and the share routed to global.

        Over the client's training samples (all of them up to 512, the engine's probe), by the
        client's router after the round; the share is that of those samples hard routing sends
        to the global copy.
        """
        return routing_shares(self.route(state["router"], batch["x"], ctx), batch["mask"])

    @staticmethod
    def route(router, x, ctx):
        """π_g^k(x) [B, K]."""
        return torch.softmax(ctx.call("router", router, x), -1)[..., 0]


def routing_shares(pi_global, mask=None):
    """Per routed layer k: the mean π_g^k and the share of instances hard-routed to global.

    Returns {"pi_global": mean π_g^k, "to_global": share with π_g^k ≥ 0.5 (hard routing's
    choice, ties to global)}, each [K], over the instances of `pi_global` [B, K] (those `mask`
    [B] keeps).

    >>> out = routing_shares(torch.tensor([[0.9, 0.2], [0.5, 0.4], [0.1, 0.3]]))
    >>> [round(v, 4) for v in out["pi_global"].tolist()], out["to_global"].tolist()
    ([0.5, 0.3], [0.6666666865348816, 0.0])
    """
    weight = torch.ones_like(pi_global[:, 0]) if mask is None else mask.to(pi_global.dtype)
    total = weight.sum().clamp_min(1.0)
    hard = (pi_global >= 0.5).to(pi_global.dtype)
    return {"pi_global": (pi_global * weight[:, None]).sum(0) / total,
            "to_global": (hard * weight[:, None]).sum(0) / total}
