"""The round loop, written once; every algorithm runs through it.

Each round: sample clients, dispatch and receive, train the algorithm's phases (each client on its
own schedule), finish, the server step (aggregate, server state), evaluate every client's
personalized model, checkpoint.

Checkpoints make a run resumable: after round r the store holds ``round_r.pt`` (the global
state_dict), ``state_r.pt`` (everything else the next rounds depend on) and, written last,
``progress.json``. A process killed at any point and started again continues from the last
finished round and ends with exactly the result of an uninterrupted run: every random draw is
derived from (seed, round, client, phase), never from a running generator.
"""

import dataclasses
import io
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from pflpipe.algorithms.base import Algorithm, Phase, Round
from pflpipe.data.files import load_tensors
from pflpipe.engine.data import FederatedData, member_seed, steps_for_epochs
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.noise import step_keys
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.trainer import Context, Job
from pflpipe.engine.tree import Group, Tree, assign, broadcast, merge, select, tree_map, where
from pflpipe.errors import DivergenceError
from pflpipe.storage.base import Store

log = logging.getLogger(__name__)
METRICS = ("round", "val_loss", "val_accuracy", "test_loss", "test_accuracy")
#: The same scores of the algorithm's global model on every client (generalized accuracy).
GLOBAL_METRICS = ("global_val_loss", "global_val_accuracy", "global_test_loss",
                  "global_test_accuracy")
#: Salts of the random streams that are not a training phase's.
_MODULES_SALT, _EVAL_SALT, _SERVER_SALT, _EVAL_PHASES = 1_000_001, 1_000_002, 1_000_003, 100


@dataclass(frozen=True)
class Plan:
    """How many rounds, and the local-training defaults of every phase."""

    rounds: int
    local_epochs: int
    batch_size: int
    lr: float
    seed: int
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    client_fraction: float = 1.0
    eval_every: int = 1
    early_stop: tuple[int, float] | None = None   # (patience, min_delta) on mean val loss
    keep_every_round: bool = False                # keep round_r.pt of every round (warm start)
    score_global: bool = True                     # score the global model too (GLOBAL_METRICS)
    stream: int = 0                               # separates the random streams of stages
    best_on_val: bool = True                      # False (no validation split): best = last
    blocks: int = 1                               # client_fraction samples each of these
                                                  # equal, contiguous blocks of clients apart


@dataclass
class FederationResult:
    """What a run of rounds leaves behind."""

    global_params: Group
    state: Tree                   # every client's state after its last local training [C]
    best_model: Tree              # each client's `scored` model at its best-val round [C]
    best: dict[str, Tensor]       # METRICS (+ GLOBAL_METRICS) at each client's best-val round [C]
    last: dict[str, Tensor]       # METRICS (+ GLOBAL_METRICS) at the last evaluated round [C]
    rows: list[dict]              # round × client × split: loss, accuracy (and train loss)
    rounds_completed: int
    stopped_early: bool
    server: Tree = field(default_factory=dict)   # the server state after the last round
    last_model: Tree = field(default_factory=dict)   # each client's `scored` model at the last
                                                     # evaluated round [C]

    @property
    def best_params(self) -> Group:
        """The personalized network's parameters at each client's best-val round [C]."""
        return self.best_model.get("model", {})


class Federation:
    """Runs an algorithm's rounds on the engine's trainer."""

    def __init__(self, algorithm: Algorithm, ctx: Context, data: FederatedData, trainer,
                 plan: Plan, store: Store | None = None, fingerprint: str = "",
                 on_round: Callable[[int, list[dict]], None] | None = None):
        self.algorithm, self.data, self.trainer = algorithm, data, trainer
        self.plan, self.store, self.fingerprint, self.on_round = plan, store, fingerprint, on_round
        self.n_clients = data.n_clients
        if self.n_clients % plan.blocks:
            raise ValueError(f"{self.n_clients} clients do not split into {plan.blocks} equal "
                             "blocks (Plan.blocks)")
        self.all_clients = torch.arange(self.n_clients, device=data.train.x.device)
        self.ctx = self._with_modules(ctx)
        if self.ctx is not ctx:
            trainer.ctx = self.ctx

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, init_global: Group) -> FederationResult:
        """Run (or resume) the rounds from `init_global`."""
        snap = self._resume()
        if snap is None:
            snap = self._start(init_global)
        plan = self.plan
        for round_idx in range(snap["round"] + 1, plan.rounds + 1):
            if snap["stopped"]:
                break
            self._round(snap, round_idx)
            if round_idx % plan.eval_every == 0 or round_idx == plan.rounds:
                self._evaluate(snap, round_idx)
            self._save(snap, round_idx)
            if self.on_round:
                self.on_round(round_idx, [r for r in snap["rows"] if r["round"] == round_idx])
        return FederationResult(snap["global"], snap["state"], snap["best_model"], snap["best"],
                                snap["last"], snap["rows"], snap["round"], snap["stopped"],
                                snap["server"], snap.get("last_model", {}))

    def _with_modules(self, ctx: Context) -> Context:
        """The context with the algorithm's extra networks, built under a seeded RNG."""
        x = self.data.train.x
        with torch.no_grad():
            n_outputs = ctx.model(x[:1]).shape[-1]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(member_seed(self.plan.seed, self.plan.stream, _MODULES_SALT))
            modules = self.algorithm.modules(tuple(x.shape[1:]), n_outputs)
        if not modules:
            return ctx
        return dataclasses.replace(ctx, modules={n: m.to(x.device) for n, m in modules.items()})

    def _start(self, init_global: Group) -> dict:
        algo, n = self.algorithm, self.n_clients
        server = {name: {k: v.detach().clone() for k, v in module.state_dict().items()}
                  for name, module in self.ctx.modules.items()}
        server.update(algo.init_server(init_global, n))
        kept = algo.init_clients(init_global, n)
        initial = {"model": broadcast(init_global, n), **kept}
        shared = {"global": init_global, "server": server}
        state = vmap(algo.receive, in_dims=(None, 0, None))(init_global, initial, shared)
        state = tree_map(torch.Tensor.clone, state)  # distinct: a receive may alias groups
        snap = {"round": 0, "global": dict(init_global), "server": server, "state": state,
                "rows": [], "stopped": False, "early": {"best": float("inf"), "bad": 0}}
        self._evaluate(snap, 0)
        self._save(snap, 0)
        return snap

    def _round(self, snap: dict, round_idx: int) -> None:
        algo, global_params = self.algorithm, snap["global"]
        clients = self._sample(round_idx)
        info = self._info(snap, round_idx, clients, select(snap["state"], clients))
        shared = {"global": global_params, "server": snap["server"]}
        sent = algo.dispatch(info)
        state = vmap(algo.receive, in_dims=(None if sent is None else 0, 0, None))(
            global_params if sent is None else sent, info.states, shared)
        start = state
        for phase_idx, phase in enumerate(algo.phases()):
            state = self._train(state, info, phase, phase_idx, shared, snap)
        state = vmap(algo.finish, in_dims=(0, 0, None))(start, state, shared)
        new_global, snap["server"] = algo.server_step(dataclasses.replace(info, states=state))
        snap["global"] = merge(global_params, new_global)
        assign(snap["state"], clients, state)
        snap["round"] = round_idx

    def _info(self, snap: dict, round_idx: int, clients: Tensor, states: Tree) -> Round:
        counts = self.data.train.counts[clients.to(self.data.train.offsets.device)]
        return Round(round_idx, clients, counts.to(clients.device), self.n_clients,
                     snap["global"], snap["server"], states,
                     member_seed(self.plan.seed, self.plan.stream, round_idx, _SERVER_SALT))

    def _sample(self, round_idx: int) -> Tensor:
        fraction, blocks = self.plan.client_fraction, self.plan.blocks
        if fraction >= 1.0:
            return self.all_clients
        size = self.n_clients // blocks
        count = max(1, int(round(fraction * size)))
        rng = np.random.default_rng([self.plan.seed, self.plan.stream, round_idx, 7])
        chosen = [block * size + np.sort(rng.choice(size, size=count, replace=False))
                  for block in range(blocks)]
        return torch.as_tensor(np.concatenate(chosen), device=self.all_clients.device)

    def _train(self, state: Tree, info: Round, phase: Phase, phase_idx: int, shared: Tree,
               snap: dict) -> Tree:
        plan, data, clients, round_idx = self.plan, self.data.train, info.clients, info.index
        counts = info.counts.cpu()
        batch_size = int(counts.max()) if phase.full_batch else plan.batch_size
        if phase.steps is not None:
            steps = torch.full((len(clients),), phase.steps, dtype=torch.long)
        else:
            steps = steps_for_epochs(counts, batch_size, phase.epochs or plan.local_epochs,
                                     phase.batches_per_step)
        lr = torch.full((len(clients),), phase.lr or plan.lr, device=clients.device)
        steps, lr = self.algorithm.schedule(dataclasses.replace(info, states=state), phase,
                                            steps, lr)
        job = Job(
            state=state, train=phase.train, objective=getattr(self.algorithm, phase.objective),
            data=data, clients=clients, steps=steps.cpu().long(),
            lr={g: torch.full_like(lr, phase.group_lr[g]) if g in phase.group_lr else lr
                for g in phase.train},
            batch_size=batch_size,
            seeds=[member_seed(plan.seed, plan.stream, round_idx, c, phase_idx)
                   for c in clients.tolist()],
            shared=shared, batches_per_step=phase.batches_per_step, optimizer=plan.optimizer)
        result = self.trainer.train(job)
        self._check_finite(result, clients, round_idx, phase, lr)
        if phase_idx == 0 and round_idx > 0:
            losses = zip(clients.tolist(), result.loss.tolist(), strict=True)
            snap["rows"] += [{"round": round_idx, "client": c, "split": "train", "loss": loss}
                             for c, loss in losses]
        return result.state

    def _check_finite(self, result, clients: Tensor, round_idx: int, phase: Phase, lrs: Tensor):
        bad = (result.bad_step >= 0).nonzero().flatten().tolist()
        if not bad:
            return
        member = bad[0]
        client, step, lr = int(clients[member]), int(result.bad_step[member]), float(lrs[member])
        done = "round 0" if round_idx == 1 else f"rounds 0–{round_idx - 1}"
        kept = (f"checkpoints of {done} are intact in {self.store.uri}"
                if self.store is not None and round_idx > 0 else "nothing was checkpointed yet")
        raise DivergenceError(
            f"client {client}, round {round_idx}: loss became NaN or infinite after {step + 1} "
            f"local step(s) of {phase.objective} (learning rate {lr:g}); "
            f"{len(bad)} client(s) diverged. The learning rate is the likely cause: lower it "
            f"(federation.lr, or the algorithm's lr). {kept[0].upper()}{kept[1:]}.",
            client=client, round_idx=round_idx)

    # ---- evaluation ------------------------------------------------------------------------
    def _evaluate(self, snap: dict, round_idx: int) -> None:
        algo, state = self.algorithm, snap["state"]
        shared = {"global": snap["global"], "server": snap["server"]}
        if algo.eval_phases():
            state = vmap(algo.receive, in_dims=(None, 0, None))(snap["global"], state, shared)
            info = self._info(snap, round_idx, self.all_clients, state)
            for phase_idx, phase in enumerate(algo.eval_phases()):
                state = self._train(state, info, phase, _EVAL_PHASES + phase_idx, shared,
                                    {"rows": []})
        models = vmap(algo.scored, in_dims=(0, None))(state, shared)
        views = {"": (models, {}, _predict(algo))}
        if self.plan.score_global:
            views["global_"] = ({}, {"model": algo.global_model(shared)}, _forward_shared)
        keys = step_keys([member_seed(self.plan.seed, self.plan.stream, round_idx, _EVAL_SALT)],
                         self.n_clients)[0]
        scores = {}
        for split in ("val", "test"):
            for prefix, (member_models, common_model, predict) in views.items():
                loss, acc = evaluate(self.ctx, predict, member_models, common_model,
                                     self.data.split(split), self.all_clients, keys=keys)
                scores[f"{prefix}{split}_loss"], scores[f"{prefix}{split}_accuracy"] = loss, acc
            columns = {f"{p}{m}": scores[f"{p}{split}_{m}"].tolist() for p in views
                       for m in ("loss", "accuracy")}
            snap["rows"] += [{"round": round_idx, "client": c, "split": split,
                              **{name: values[c] for name, values in columns.items()}}
                             for c in range(self.n_clients)]
        scores["round"] = torch.full_like(scores["val_loss"], round_idx)
        snap["last"], snap["last_model"] = scores, models
        self._track_best(snap, scores, models)
        self._early_stop(snap, scores)

    def _track_best(self, snap: dict, scores: dict, models: Tree) -> None:
        if "best" not in snap:
            snap["best"], snap["best_model"] = dict(scores), tree_map(torch.Tensor.clone, models)
            return
        best = snap["best"]
        acc, best_acc = scores["val_accuracy"], best["val_accuracy"]
        tie = (acc == best_acc) | (acc.isnan() & best_acc.isnan())
        improved = (acc > best_acc) | (tie & (scores["val_loss"] < best["val_loss"]))
        if not self.plan.best_on_val:
            improved = torch.ones_like(improved)
        snap["best"] = {k: torch.where(improved, scores[k], best[k]) for k in scores}
        snap["best_model"] = where(improved, models, snap["best_model"])

    def _early_stop(self, snap: dict, scores: dict) -> None:
        if self.plan.early_stop is None or snap["round"] == 0:
            return
        patience, min_delta = self.plan.early_stop
        counts = self.data.val.counts.to(scores["val_loss"].device).float()
        mean = float((scores["val_loss"] * counts).sum() / counts.sum())
        early = snap["early"]
        if mean < early["best"] - min_delta:
            early["best"], early["bad"] = mean, 0
        else:
            early["bad"] += 1
        snap["stopped"] = early["bad"] >= patience

    # ---- checkpoints ------------------------------------------------------------------------
    def _save(self, snap: dict, round_idx: int) -> None:
        if self.store is None:
            return
        store = self.store
        store.put_bytes(f"round_{round_idx:04d}.pt", _dump(snap["global"]))
        store.put_bytes(f"state_{round_idx:04d}.pt", _dump({k: v for k, v in snap.items()
                                                             if k != "global"}))
        store.put_bytes("progress.json", json.dumps({
            "rounds_completed": round_idx, "stopped_early": snap["stopped"],
            "fingerprint": self.fingerprint}).encode())
        for key in store.list():
            if key.startswith("state_") and key != f"state_{round_idx:04d}.pt":
                _delete(store, key)
            elif (key.startswith("round_") and not self.plan.keep_every_round
                  and key != f"round_{round_idx:04d}.pt"):
                _delete(store, key)

    def _load(self, key: str):
        """A checkpoint of the store; a damaged or tampered one is a DataError naming it."""
        return load_tensors(io.BytesIO(self.store.get_bytes(key)), "a checkpoint the engine "
                            "wrote", self.all_clients.device, f"{self.store.uri}/{key}")

    def _resume(self) -> dict | None:
        if self.store is None or not self.store.exists("progress.json"):
            return None
        progress = json.loads(self.store.get_bytes("progress.json"))
        if progress.get("fingerprint") != self.fingerprint:
            raise DivergenceError(
                f"{self.store.uri} holds checkpoints of another configuration "
                f"({progress.get('fingerprint')!r}, expected {self.fingerprint!r}); "
                "move them away or point the storage elsewhere")
        round_idx = progress["rounds_completed"]
        snap = self._load(f"state_{round_idx:04d}.pt")
        snap["global"] = self._load(f"round_{round_idx:04d}.pt")
        log.info("resuming from round %d of %s", round_idx, self.store.uri)
        return snap


def _predict(algorithm: Algorithm):
    """Adapt `algorithm.predict` to `evaluate`'s signature: each member its own model."""
    def predict(model: Tree, shared: Tree, x: Tensor, ctx, key: Tensor) -> Tensor:
        return algorithm.predict(model, x, ctx, key)

    return predict


def _forward_shared(model: Tree, shared: Tree, x: Tensor, ctx, key: Tensor) -> Tensor:
    """`evaluate`'s predict for one network shared by every member."""
    return ctx.forward(shared["model"], x)


def _dump(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(_to_cpu(obj), buffer)
    return buffer.getvalue()





def _to_cpu(obj):
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj


def _delete(store: Store, key: str) -> None:
    store.delete(key)
