"""pflpipe's FedAvg warm start in plain PyTorch: the logic of the exported Flower app, no Flower.

Written by `pflpipe split SPEC --export flower DIR` into `DIR/pflpipe_fedavg/`; it needs torch and
numpy only. `client_app.py` and `server_app.py` wrap these functions in Flower's Message API;
`run_in_process` runs the same client and server logic in one process.

What pflpipe's engine does, and so what this does (the settings are in `DIR/reproduce.json`):
- round 0 starts from `initial_weights.pt` (the model's seeded initialisation);
- each round the server samples clients (all of them when client_fraction is 1), sends the global
  weights, each client trains `local_epochs` epochs of mini-batches, and the server replaces the
  global weights by the mean of the clients' weights, weighted by their training samples n_k / n,
  summed in client order;
- batch order: client k in round r draws from a torch.Generator seeded with
  member_seed(seed, 0, r, k, 0); each epoch is torch.randperm(n) of its n training samples, cut
  into batches of batch_size in order, the last one short. A client with n <= batch_size trains on
  all its samples, in their order, every step;
- after round 0 and after every round every client scores the global model on its test split:
  accuracy = correct / n.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import model as model_code

SETTINGS = "reproduce.json"
INITIAL_WEIGHTS = "initial_weights.pt"
Weights = dict[str, torch.Tensor]


@dataclass
class Package:
    """The exported directory: settings, partition, model and initial weights."""

    root: Path
    settings: dict
    _arrays: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root) -> "Package":
        """Read `root/reproduce.json`."""
        root = Path(root)
        return cls(root, json.loads((root / SETTINGS).read_text(encoding="utf-8")))

    @property
    def n_clients(self) -> int:
        """Number of clients (Flower partitions)."""
        return int(self.settings["partition"]["num_partitions"])

    def data(self, client: int, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Client `client`'s (x, y) of `split` ("train", "val" or "test")."""
        if (client, split) not in self._arrays:
            arrays = np.load(self.root / f"partition_{client}" / f"{split}.npz")
            self._arrays[client, split] = (torch.from_numpy(arrays["x"]),
                                           torch.from_numpy(arrays["y"]))
        return self._arrays[client, split]

    def model(self) -> torch.nn.Module:
        """The network (model.py), holding the initial weights."""
        network = model_code.build(self.root)
        network.load_state_dict(self.initial_weights())
        return network

    def initial_weights(self) -> Weights:
        """The round-0 global weights."""
        return torch.load(self.root / INITIAL_WEIGHTS, weights_only=True)


def member_seed(*parts: int) -> int:
    """The 63-bit seed pflpipe derives from integers (seed, stream, round, client, phase)."""
    state = np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)
    return int(state[0] >> np.uint64(1))


def batch_order(n: int, batch_size: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """The sample indices of each mini-batch of one client's local training in one round."""
    per_epoch = -(-n // batch_size)
    if n <= batch_size:
        return [torch.arange(n)] * epochs
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        batches += [order[i * batch_size:(i + 1) * batch_size] for i in range(per_epoch)]
    return batches


def sampled_clients(package: Package, server_round: int) -> list[int]:
    """The clients that train in `server_round`, in ascending order."""
    fraction, n = package.settings["client_fraction"], package.n_clients
    if fraction >= 1.0:
        return list(range(n))
    rng = np.random.default_rng([package.settings["seed"], 0, server_round, 7])
    count = max(1, int(round(fraction * n)))
    return sorted(int(c) for c in rng.choice(n, size=count, replace=False))


def _optimizer(settings: dict, params) -> torch.optim.Optimizer:
    opt = settings["optimizer"]
    if opt["name"] == "adam":
        return torch.optim.Adam(params, lr=settings["lr"], betas=tuple(opt["betas"]),
                                eps=opt["eps"], weight_decay=opt["weight_decay"], foreach=False)
    return torch.optim.SGD(params, lr=settings["lr"], momentum=opt["momentum"],
                           weight_decay=opt["weight_decay"], foreach=False)


def train(package: Package, client: int, weights: Weights, server_round: int
          ) -> tuple[Weights, int, float]:
    """Train the global `weights` on `client`'s data; return its weights, n_k and mean loss."""
    settings = package.settings
    network = package.model()
    network.load_state_dict(weights)
    x, y = package.data(client, "train")
    optimizer = _optimizer(settings, list(network.parameters()))
    seed = member_seed(settings["seed"], 0, server_round, client, 0)
    total, batches = 0.0, batch_order(len(y), settings["batch_size"], settings["local_epochs"],
                                      seed)
    for ids in batches:
        output = network(x[ids])
        per_sample = -torch.log_softmax(output, -1).gather(-1, y[ids].unsqueeze(-1)).squeeze(-1)
        loss = per_sample.sum() / float(len(ids))   # pflpipe's mean: sum / n (to the bit)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    state = {k: v.detach().clone() for k, v in network.state_dict().items()}
    return state, len(y), total / max(len(batches), 1)


@torch.no_grad()
def evaluate(package: Package, client: int, weights: Weights, split: str = "test"
             ) -> tuple[float, float, int]:
    """Loss, accuracy and samples of `weights` on `client`'s `split`."""
    network = package.model()
    network.load_state_dict(weights)
    x, y = package.data(client, split)
    output = network(x)
    loss = torch.nn.functional.cross_entropy(output, y, reduction="none").sum() / len(y)
    accuracy = (output.argmax(-1) == y).float().sum() / len(y)
    return float(loss), float(accuracy), len(y)


def aggregate(results: list[tuple[int, Weights, int]]) -> Weights:
    """The mean of the clients' weights, weighted by n_k / n, summed in client order.

    `results` holds (client, weights, n_k) in any order.
    """
    results = sorted(results, key=lambda result: result[0])
    counts = torch.tensor([n for _, _, n in results]).float()
    share = counts / counts.sum()
    out = {}
    for key, value in results[0][1].items():
        stacked = torch.stack([weights[key] for _, weights, _ in results])
        if value.is_floating_point():
            out[key] = torch.tensordot(share.to(value.dtype), stacked, dims=1)
        else:
            out[key] = torch.tensordot(share.double(), stacked.double(), dims=1).round().to(
                value.dtype)
    return out


def server_step(settings: dict, current: Weights, mean: Weights, state: dict
                ) -> tuple[Weights, dict]:
    """Apply the round's weighted mean (Reddi et al. 2021: fedavg η, fedadam, fedyogi)."""
    opt = settings["server_optimizer"]
    if opt["name"] == "fedavg" and opt["lr"] == 1.0:
        return mean, state
    out, moments = {}, {"m": dict(state.get("m", {})), "v": dict(state.get("v", {}))}
    for key, value in mean.items():
        x = current[key]
        if not value.is_floating_point():
            out[key] = value
            continue
        delta = value - x
        if opt["name"] == "fedavg":
            out[key] = x + opt["lr"] * delta
            continue
        m = opt["beta1"] * moments["m"].get(key, torch.zeros_like(x)) + (1 - opt["beta1"]) * delta
        v = moments["v"].get(key, torch.full_like(x, opt["tau"] ** 2))
        square = delta * delta
        v = (v - (1 - opt["beta2"]) * square * torch.sign(v - square)
             if opt["name"] == "fedyogi" else opt["beta2"] * v + (1 - opt["beta2"]) * square)
        moments["m"][key], moments["v"][key] = m, v
        out[key] = x + opt["lr"] * m / (v.sqrt() + opt["tau"])
    return out, moments


#: fit(clients, global weights, round) -> [(client, weights, n_k)];
#: score(global weights) -> {client: (loss, accuracy, n)}
Fit = Callable[[list[int], Weights, int], list[tuple[int, Weights, int]]]
Score = Callable[[Weights], dict[int, tuple[float, float, int]]]


def federate(package: Package, fit: Fit, score: Score, rounds: int | None = None) -> list[dict]:
    """The server's loop; returns a row per (round, client): test loss and accuracy.

    `fit` and `score` reach the clients (Flower messages in server_app.py, direct calls in
    `run_in_process`).
    """
    settings = package.settings
    rounds = settings["rounds"] if rounds is None else rounds
    weights, state = package.initial_weights(), {}
    rows = _rows(0, score(weights))
    for server_round in range(1, rounds + 1):
        results = fit(sampled_clients(package, server_round), weights, server_round)
        weights, state = server_step(settings, weights, aggregate(results), state)
        rows += _rows(server_round, score(weights))
    return rows


def _rows(server_round: int, scores: dict) -> list[dict]:
    return [{"round": server_round, "client": client, "loss": loss, "accuracy": accuracy,
             "n": n} for client, (loss, accuracy, n) in sorted(scores.items())]


def run_in_process(root, rounds: int | None = None) -> list[dict]:
    """Run the clients' and the server's logic in this process (no Flower)."""
    package = Package.load(root)

    def fit(clients, weights, server_round):
        return [(c, *train(package, c, weights, server_round)[:2]) for c in clients]

    def score(weights):
        return {c: evaluate(package, c, weights) for c in range(package.n_clients)}

    return federate(package, fit, score, rounds)


def table(rows: list[dict], server_round: int | None = None) -> str:
    """Per-client test accuracy of one round (default the last) as a Markdown table."""
    server_round = max(r["round"] for r in rows) if server_round is None else server_round
    chosen = [r for r in rows if r["round"] == server_round]
    lines = [f"round {server_round}", "", "| client | test accuracy |", "|---:|---:|"]
    lines += [f"| {r['client']} | {r['accuracy']:.4f} |" for r in chosen]
    mean = sum(r["accuracy"] for r in chosen) / len(chosen)
    return "\n".join([*lines, f"| mean | {mean:.4f} |"])


def package_dir(run_config) -> Path:
    """The exported directory: the run config's `package-dir`, else the one holding this code."""
    return Path(run_config.get("package-dir") or Path(__file__).resolve().parents[1])
