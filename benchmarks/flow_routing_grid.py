"""Where Flow's hard routing sends instances, per routed layer, over a grid of its settings.

Chooses Flow's defaults (docs/results.md, Flow): for every grid point and seed
it trains Flow alone on digits with Dirichlet(α) label skew (no FedAvg, no baselines), scores
once after the last round (each client re-creates its personalized model first, as Flow does
before scoring) and prints one JSON line: the mean validation PA and GA over clients, and per
routed layer the share of each split's instances hard-routed to global (π_g ≥ 0.5), the mean
π_g, its standard deviation over instances (pooled, and within a client: ``pi_sd_within``, the
mean over clients) and the number of clients whose own share is strictly inside 5-95 %; per
split, how many predictions change when each client routes every instance by its majority route
(``majority_changes``), how many instances some constant route gets right and another wrong
(``route_sensitive``) and how many the all-global route gets right and Flow's routing wrong
(``global_only``); with `--trajectory-every n`, the sampled clients' mean share per layer every
n rounds. Choose settings on tuning seeds only (never the reported ones).

    python benchmarks/flow_routing_grid.py --seeds 100 101 102 103 \\
        --lam 0.1 0.01 0.001 0.0001 --momentum 0 0.9

The shipped spec's scale is `--clients 100 --rounds 300 --client-fraction 0.1` (about a minute
a seed on one thread). Defaults: 20 clients, α = 0.1, 60 rounds, half the clients per round, 3
local epochs, batch 20,
lr 0.05, Eq. 5 `standalone` (`--global-update routed` for the paper-text reading), digits scaled
to [0, 1] (`--normalization standard` or `per_feature` standardise them). `--split` and
`--local-epochs-first` set Flow's ζ_l share and E_l (the paper allows E_l ≠ E_g; Appendix D.3
tries other splits);
`--router-lr-scale` multiplies the routing network's learning rate only: a probe, neither the
paper's (one learning rate η) nor the reference code's (one optimizer for every group).
`--warm-start` first trains FedAvg for the same rounds and starts Flow's global layers from its
final model, as the pipeline's default `warm_start: final` does for other personalization
algorithms (the paper's Algorithm 1 and the reference code start Flow from a random model).
`--router-exit activation` puts each exit on its trunk layer's ReLU output, as the reference
code's EMNIST policy network does (less its dropout) and Flow did until 2026-11-26; the default,
`pre`, is Flow's router (exits on the pre-activations, as the reference code's CIFAR one).
"""

import argparse
import itertools
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from pflpipe.algorithms.fedavg import FedAvg
from pflpipe.algorithms.flow import Flow, Router, routed_forward, routing_shares
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.spec import parse_spec
from pflpipe.spec.algorithms import FlowParams
from pflpipe.stages import partition_data
from pflpipe.training import stage_setup


def shares(federation: Federation, result, split) -> dict[str, list[float]]:
    """Per routed layer over `split`'s instances of every client (its last scored router)."""
    pis, per_client = [], []
    for client in range(split.n_clients):
        x, _ = split.client(client)
        router = {k: v[client] for k, v in result.last_model["router"].items()}
        with torch.no_grad():
            pi = Flow.route(router, x, federation.ctx)
        pis.append(pi)
        per_client.append(routing_shares(pi)["to_global"])
    pooled, clients = routing_shares(torch.cat(pis)), torch.stack(per_client)
    within = torch.stack([pi.std(0) if len(pi) > 1 else torch.zeros_like(pi[0]) for pi in pis])
    return {"to_global": [round(100 * v, 1) for v in pooled["to_global"].tolist()],
            "pi_global": [round(100 * v, 1) for v in pooled["pi_global"].tolist()],
            "pi_sd": [round(100 * v, 1) for v in torch.cat(pis).std(0).tolist()],
            "pi_sd_within": [round(100 * v, 1) for v in within.mean(0).tolist()],
            "mixed_clients": ((clients > 0.05) & (clients < 0.95)).sum(0).tolist(),
            **routes(federation, result, split)}


def routes(federation: Federation, result, split) -> dict:
    """What per-instance routing changes on `split`, over every client's last scored model.

    ``majority_changes``: predictions that change when each client routes every instance by its
    own majority route per layer (the route hard routing picks for most of its instances);
    ``route_sensitive``: instances whose correctness differs between the 2^K constant routes
    (what a per-instance router could act on); ``global_only``: instances the all-global route
    gets right and the client's hard routing gets wrong (Flow's Fig. 3 category).
    """
    ctx, model = federation.ctx, result.last_model
    changes = sensitive = global_only = 0
    for client in range(split.n_clients):
        x, y = split.client(client)
        own = {group: {k: v[client] for k, v in model[group].items()}
               for group in ("model", "local", "router")}
        with torch.no_grad():
            hard = (Flow.route(own["router"], x, ctx) >= 0.5).float()
            routed = _predict(ctx, own, hard, x)
            majority = (hard.mean(0, keepdim=True) >= 0.5).float().expand_as(hard)
            changes += int((_predict(ctx, own, majority, x) != routed).sum())
            k = hard.shape[1]
            correct = torch.stack([
                _predict(ctx, own, torch.tensor(bits, dtype=hard.dtype).expand_as(hard), x) == y
                for bits in itertools.product((0.0, 1.0), repeat=k)])
            sensitive += int((correct.any(0) & ~correct.all(0)).sum())
            global_only += int((correct[-1] & (routed != y)).sum())
    return {"majority_changes": changes, "route_sensitive": sensitive,
            "global_only": global_only, "instances": int(split.counts.sum())}


def _predict(ctx, own: dict, pi, x):
    """A client's predictions routed by `pi` [B, K] (hard or soft)."""
    return routed_forward(ctx.model, own["model"], own["local"], pi, x).argmax(-1)


def trajectory(rows: list[dict], every: int) -> dict[int, list[float]]:
    """Per round (every `every`-th), the share routed to global per layer, %.

    From the engine's train rows (``diag.to_global.k``: each sampled client's router after the
    round, on its training samples), averaged over the round's clients.
    """
    out = {}
    for row in rows:
        if row["split"] == "train" and row["round"] % every == 0:
            keys = sorted(k for k in row if k.startswith("diag.to_global."))
            out.setdefault(row["round"], []).append([row[k] for k in keys])
    return {r: [round(100 * sum(c) / len(c), 1) for c in zip(*v, strict=True)]
            for r, v in sorted(out.items())}


class ScaledRouterLr(Flow):
    """Flow whose routing network trains at `scale` × the learning rate (`--router-lr-scale`)."""

    scale = 1.0
    exit = "pre"
    router_input = "raw"

    def modules(self, in_shape, n_outputs, model=None):
        """Flow's router, its exits moved to the activations for `--router-exit activation`."""
        router = super().modules(in_shape, n_outputs, model)["router"]
        if self.exit == "activation":
            router.__class__ = ActivationRouter
        if self.router_input != "raw":
            router.__class__ = type("InputRouter", (router.__class__,),
                                    {"forward": _prepared(router.__class__.forward,
                                                          self.router_input)})
        return {"router": router}

    def phases(self):
        """Flow's phases, the router's group at its own learning rate."""
        local, routing = super().phases()
        return local, replace(routing, group_lr={"router": self.lr * self.scale})


class ActivationRouter(Router):
    """Router whose exits read the trunk layers' ReLU outputs (`--router-exit activation`)."""

    def forward(self, x):
        """Return the routing logits [B, K, 2]."""
        h, logits = x.flatten(1), []
        for layer, exit_ in zip(self.trunk, self.exits, strict=True):
            h = torch.relu(layer(h))
            logits.append(exit_(h))
        return torch.stack([*logits, self.last(h)], 1)


def _prepared(forward, how: str):
    """`forward` on the router's input as the reference code prepares it (`--router-input`).

    per_image: tf.image.per_image_standardization (its CIFAR loader): (x − mean) / max(std,
    1/√N) per image; inverted: 1 − x, TFF's EMNIST pixels (background 1, ink 0).
    """
    def prepared(self, x):
        flat = x.flatten(1)
        if how == "inverted":
            return forward(self, 1 - flat)
        floor = torch.full_like(flat[:, :1], flat.shape[1] ** -0.5)
        std = torch.maximum(flat.std(1, unbiased=False, keepdim=True), floor)
        return forward(self, (flat - flat.mean(1, keepdim=True)) / std)

    return prepared


def warm_start(s, plan: Plan, args):
    """FedAvg's final global model after `plan`'s rounds (`--warm-start`)."""
    fedavg = FedAvg(None, head=s.head, lr=args.lr, local_epochs=args.epochs)
    federation = Federation(fedavg, s.ctx, s.data, BatchedTrainer(s.ctx),
                            replace(plan, score_global=False))
    return federation.run(s.init).global_params


def run_point(s, seed: int, args, lam: float, momentum: float) -> dict:
    """Train one grid point on one seed; its scores and routing."""
    start = time.perf_counter()
    ScaledRouterLr.scale = args.router_lr_scale
    ScaledRouterLr.exit = args.router_exit
    ScaledRouterLr.router_input = args.router_input
    flow = ScaledRouterLr(FlowParams(name="flow", lam=lam, global_update=args.global_update,
                                     split=args.split,
                                     local_epochs_first=args.local_epochs_first),
                          head=s.head, lr=args.lr, local_epochs=args.epochs)
    plan = Plan(rounds=args.rounds, local_epochs=args.epochs, batch_size=args.batch_size,
                lr=args.lr, seed=seed, client_fraction=args.client_fraction,
                eval_every=args.rounds, optimizer=OptimizerConfig(momentum=momentum))
    federation = Federation(flow, s.ctx, s.data, BatchedTrainer(s.ctx), plan)
    result = federation.run(warm_start(s, plan, args) if args.warm_start else s.init)
    return {"seed": seed, "lam": lam, "warm_start": args.warm_start,
            "router_exit": args.router_exit, "router_input": args.router_input,
            "momentum": momentum,
            "global_update": args.global_update,
            "normalization": args.normalization, "split": args.split,
            "E_l": args.local_epochs_first or args.epochs, "router_lr_scale": args.router_lr_scale,
            "val_PA": round(100 * result.last["val_accuracy"].nanmean().item(), 1),
            "val_GA": round(100 * result.last["global_val_accuracy"].nanmean().item(), 1),
            **{f"{name}_{key}": value for name in ("val", "test")
               for key, value in shares(federation, result, getattr(s.data, name)).items()},
            **({"trajectory": trajectory(result.rows, args.trajectory_every)}
               if args.trajectory_every else {}),
            "seconds": round(time.perf_counter() - start)}


def main() -> None:
    """Print one JSON line per seed and grid point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101])
    parser.add_argument("--lam", type=float, nargs="+", default=[0.1, 0.01, 0.001, 0.0001])
    parser.add_argument("--momentum", type=float, nargs="+", default=[0.0, 0.9])
    parser.add_argument("--global-update", default="standalone", choices=("standalone", "routed"))
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--client-fraction", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--normalization", default="scale",
                        choices=("scale", "standard", "per_feature"))
    parser.add_argument("--split", type=float, default=0.5)
    parser.add_argument("--local-epochs-first", type=int)
    parser.add_argument("--router-lr-scale", type=float, default=1.0)
    parser.add_argument("--warm-start", action="store_true")
    parser.add_argument("--router-exit", default="pre", choices=("pre", "activation"))
    parser.add_argument("--router-input", default="raw",
                        choices=("raw", "per_image", "inverted"),
                        help="what the router reads: the model's input (raw), or it prepared as "
                        "the reference code's data is (per_image: CIFAR's per-image "
                        "standardisation; inverted: TFF EMNIST's 1 − x)")
    parser.add_argument("--trajectory-every", type=int, default=0,
                        help="also print the sampled clients' mean share routed to global per "
                        "layer every this many rounds (their routers after the round)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="flow-routing-"))
    for seed in args.seeds:
        spec = parse_spec(
            f"experiment: {{name: flow-routing}}\n"
            f"dataset: {{name: digits, normalization: {args.normalization}}}\n"
            f"partition: {{strategy: dirichlet, n_clients: {args.clients}, alpha: {args.alpha}}}\n"
            f"tracking: {{enabled: false}}\nengine: {{threads: 1}}\n"
            f"storage: {{kind: local, path: {root / 'store'}}}\n")
        partition_data.run(spec, seed, root / f"partition-{seed}")
        s = stage_setup.setup(spec, seed, root / f"partition-{seed}")
        for lam, momentum in itertools.product(args.lam, args.momentum):
            print(json.dumps(run_point(s, seed, args, lam, momentum)), flush=True)


if __name__ == "__main__":
    main()
