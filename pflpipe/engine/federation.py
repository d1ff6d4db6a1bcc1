"""The round loop, written once; every algorithm runs through it.

Each round: sample clients, dispatch and receive, train the algorithm's phases (each client on its
own schedule), finish, the server step (the algorithm's one server rule: FedAvg's aggregates and
applies the server optimizer), evaluate the clients' personalized models, checkpoint.

Evaluation scores every client, or (``eval_clients: sampled``, cross-device) only the round's
sampled clients between full sweeps every `full_eval_every` rounds, at round 0 and after the
last round: a round then costs what its sampled clients cost, whatever the federation's size. A
client's best-val round is chosen among the rounds it was scored in (`pflpipe.engine.selection`).

Checkpoints make a run resumable (`pflpipe.engine.checkpoint`): a process killed at any point
and started again continues from the last checkpointed round and ends with exactly the result of
an uninterrupted run: every random draw is derived from (seed, round, client, phase), never from
a running generator.
"""

import dataclasses
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from pflpipe.engine import accounting, blowup, checkpoint, selection
from pflpipe.engine.data import FederatedData, member_seed, steps_for_epochs
from pflpipe.engine.evaluate import evaluate, forward_shared, member_predict
from pflpipe.engine.noise import step_keys
from pflpipe.engine.optim import OptimizerConfig
from pflpipe.engine.protocol import AlgorithmProtocol, Phase, Round, objective_name, public
from pflpipe.engine.trainer import Context, Job
from pflpipe.engine.tree import Group, Tree, assign, merge, renew, select, tree_map
from pflpipe.errors import DataError, DivergenceError
from pflpipe.storage.store_protocol import Store

log = logging.getLogger(__name__)
METRICS = ("round", "val_loss", "val_accuracy", "test_loss", "test_accuracy")
#: The same scores of the algorithm's global model on every client (generalized accuracy).
GLOBAL_METRICS = ("global_val_loss", "global_val_accuracy", "global_test_loss",
                  "global_test_accuracy")
#: Salts of the random streams that are not a training phase's.
_MODULES_SALT, _EVAL_SALT, _SERVER_SALT, _EVAL_PHASES = 1_000_001, 1_000_002, 1_000_003, 100
_PART_SALT = 1_000_004


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
    #: Which clients an evaluation scores: "all", or "sampled" (the round's own; cross-device)
    #: with every client scored every `full_eval_every` rounds, at round 0 and after the last.
    eval_clients: str = "all"
    full_eval_every: int | None = None
    #: Checkpoint the client states every n rounds (and after the last); results are the same.
    checkpoint_every: int = field(default=1, repr=False)
    #: Stop as diverged when a scored model's loss exceeds this multiple of its round-0 value
    #: with accuracy at chance (`pflpipe.engine.blowup`; the stages pass
    #: federation.divergence_factor); None: only NaN/inf stop a run. Not in the checkpoints'
    #: fingerprint: it stops a run or not, and changes none of its numbers.
    divergence_factor: float | None = field(default=None, repr=False)


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

    #: Scores members on a split (`evaluate`'s signature); a sharded federation splits the work.
    score = staticmethod(evaluate)

    def __init__(self, algorithm: AlgorithmProtocol, ctx: Context, data: FederatedData, trainer,
                 plan: Plan, store: Store | None = None, fingerprint: str = "",
                 on_round: Callable[[int, list[dict]], None] | None = None):
        self.algorithm, self.data, self.trainer = algorithm, data, trainer
        self.plan, self.store, self.fingerprint, self.on_round = plan, store, fingerprint, on_round
        self.n_clients = data.n_clients
        if self.n_clients % plan.blocks:
            raise ValueError(f"{self.n_clients} clients do not split into {plan.blocks} equal "
                             "blocks (Plan.blocks)")
        self.all_clients = torch.arange(self.n_clients, device=data.train.x.device)
        self._watch = blowup.Watch(data)
        self.ctx = self._with_modules(ctx)
        if self.ctx is not ctx:
            trainer.ctx = self.ctx

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, init_global: Group) -> FederationResult:
        """Run (or resume) the rounds from `init_global`."""
        plan, snap = self.plan, self._resume()
        if snap is None:
            snap = self._start(init_global)
        elif snap.get(checkpoint.FINISHED) and snap["round"] < plan.rounds and not snap["stopped"]:
            raise DataError(f"{self.store.uri}: a finished run's compacted checkpoint (round "
                            f"{snap['round']}) cannot be trained on to round {plan.rounds}; "
                            "move it away")
        for round_idx in range(snap["round"] + 1, plan.rounds + 1):
            if snap["stopped"]:
                break
            first_row = len(snap["rows"])
            self._round(snap, round_idx)
            if round_idx % plan.eval_every == 0 or round_idx == plan.rounds:
                self._evaluate(snap, round_idx)
            last = round_idx == plan.rounds or snap["stopped"]
            if last or round_idx % plan.checkpoint_every == 0:
                self._save(snap, round_idx)
            elif plan.keep_every_round and self.store is not None:
                self._keep(snap["global"], round_idx)
            if self.on_round:
                self.on_round(round_idx, snap["rows"][first_row:])
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
            wants_model = "model" in inspect.signature(self.algorithm.modules).parameters
            modules = self.algorithm.modules(tuple(x.shape[1:]), n_outputs,
                                             **({"model": ctx.model} if wants_model else {}))
        if not modules:
            return ctx
        return dataclasses.replace(ctx, modules={n: m.to(x.device) for n, m in modules.items()})

    def _start(self, init_global: Group) -> dict:
        algo = self.algorithm
        server, initial = self._initial(init_global)
        shared = {"global": init_global, "server": public(server)}
        state = vmap(algo.receive, in_dims=(None, 0, None))(init_global, initial, shared)
        state = tree_map(torch.Tensor.clone, state)  # distinct: a receive may alias groups
        snap = {"round": 0, "global": dict(init_global), "server": server, "state": state,
                "rows": [], "stopped": False, "early": {"best": float("inf"), "bad": 0}}
        self._evaluate(snap, 0)
        self._save(snap, 0)
        return snap

    def _initial(self, init_global: Group) -> tuple[Tree, Tree]:
        """The server state and every client's state before its first `receive`."""
        algo, n = self.algorithm, self.n_clients
        server = {name: {k: v.detach().clone() for k, v in module.state_dict().items()}
                  for name, module in self.ctx.modules.items()}
        # An algorithm's own initial tensors (a step count, APFL's α) follow the model's device.
        device = next(iter(init_global.values())).device
        server.update(tree_map(lambda v: v.to(device), algo.init_server(init_global, n)))
        kept = tree_map(lambda v: v.to(device), algo.init_clients(init_global, n))
        return server, {"model": {k: v.expand(n, *v.shape) for k, v in init_global.items()},
                        **kept}

    def _round(self, snap: dict, round_idx: int) -> None:
        algo, global_params = self.algorithm, snap["global"]
        clients = self._sample(round_idx)
        every = clients is self.all_clients   # then the round's states replace the old ones
        states = ({g: dict(tensors) for g, tensors in snap["state"].items()} if every
                  else select(snap["state"], clients))
        info = self._info(snap, round_idx, clients, states)
        shared = {"global": global_params, "server": public(snap["server"])}
        sent = algo.dispatch(info)
        state = vmap(algo.receive, in_dims=(None if sent is None else 0, 0, None))(
            global_params if sent is None else sent, info.states, shared)
        start, tally, losses = state, accounting.Tally(len(clients)), []
        for phase_idx, phase in enumerate(algo.phases()):
            state, loss = self._train(state, info, phase, phase_idx, shared, tally)
            losses.append(loss)
        state = vmap(algo.finish, in_dims=(0, 0, None))(start, state, shared)
        reads = accounting.Reads(state)
        new_global, snap["server"] = algo.server_step(dataclasses.replace(info, states=reads))
        snap["rows"] += accounting.record(algo, self.ctx, self.data.train, self.plan,
                                          dataclasses.replace(info, states=state), shared,
                                          snap["server"], new_global, reads.read, tally, losses)
        snap["global"] = merge(global_params, new_global)
        if every:
            renew(snap["state"], state)
        else:
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
               tally: accounting.Tally | None = None) -> tuple[Tree, Tensor]:
        """Train `phase`: the new states, mean losses [C]; `tally` counts what the trainer ran."""
        plan, data, clients, round_idx = self.plan, self.data.train, info.clients, info.index
        counts = info.counts.cpu()
        samples = None
        if phase.part is not None:
            samples = [self._part(round_idx, c, n, phase.part)
                       for c, n in zip(clients.tolist(), counts.tolist(), strict=True)]
            counts = torch.tensor([len(s) for s in samples], dtype=torch.long)
        batch_size = int(counts.max()) if phase.full_batch else plan.batch_size
        if phase.steps is not None:
            steps = torch.full((len(clients),), phase.steps, dtype=torch.long)
        else:
            steps = steps_for_epochs(counts, batch_size, phase.epochs or plan.local_epochs,
                                     phase.batches_per_step)
        lr = torch.full((len(clients),), phase.lr or plan.lr, device=clients.device)
        steps, lr = self.algorithm.schedule(dataclasses.replace(info, states=state), phase,
                                            steps, lr)
        groups = (*phase.train, *(g for _, train in phase.then for g in train))
        job = Job(
            state=state, train=phase.train,
            objective=phase.objective or self.algorithm.local_objective,
            data=data, clients=clients, steps=steps.cpu().long(),
            lr={g: torch.full_like(lr, phase.group_lr[g]) if g in phase.group_lr else lr
                for g in groups},
            batch_size=batch_size,
            seeds=[self._seed(round_idx, c, phase_idx) for c in clients.tolist()],
            shared=shared, batches_per_step=phase.batches_per_step,
            optimizer=_optimizer(plan.optimizer, phase.optimizer),
            samples=samples,
            then=phase.then)
        result = self.trainer.train(job)
        self._check_finite(result, clients, round_idx, phase, lr)
        if tally is not None:
            tally.add(self.ctx, job)
        return result.state, result.loss

    def _part(self, round_idx: int, client: int, n: int, part: tuple[float, float]) -> Tensor:
        """A client's samples in `part` of its shuffle of this round (the same for every phase)."""
        generator = torch.Generator().manual_seed(self._seed(round_idx, client, _PART_SALT))
        order = torch.randperm(n, generator=generator)
        return order[round(part[0] * n):round(part[1] * n)]

    def _seed(self, round_idx: int, client: int, salt: int) -> int:
        """The seed of one client's draws of a round (a training phase's, or a part's)."""
        return member_seed(self.plan.seed, self.plan.stream, round_idx,
                           self.data.client_id(client), salt)

    def _eval_keys(self, round_idx: int, clients: Tensor) -> Tensor:
        """The noise keys of the evaluated `clients` in a round [C']."""
        first = self.data.first_client
        return step_keys([member_seed(self.plan.seed, self.plan.stream, round_idx, _EVAL_SALT)],
                         first + self.n_clients)[0][first + clients.cpu()]

    def _check_finite(self, result, clients: Tensor, round_idx: int, phase: Phase, lrs: Tensor):
        bad = (result.bad_step >= 0).nonzero().flatten().tolist()
        if not bad:
            return
        member = bad[0]
        client, where = self._client(clients[member])
        step, lr = int(result.bad_step[member]), float(lrs[member])
        raise DivergenceError(
            f"{where}, round {round_idx}: loss became NaN or infinite after {step + 1} "
            f"local step(s) of {objective_name(phase.objective)} (learning rate {lr:g}); "
            f"{len(bad)} client(s) diverged. The learning rate is the likely cause: lower it "
            f"(federation.lr, or the algorithm's lr). {self._kept(round_idx)}.",
            client=client, round_idx=round_idx)

    def _check_blowup(self, snap: dict, scores: dict[str, Tensor], clients: Tensor,
                      round_idx: int) -> None:
        """Raise DivergenceError when a scored model blew up (`pflpipe.engine.blowup`)."""
        factor = self.plan.divergence_factor
        if factor is None or round_idx == 0 or self.ctx.task == "regression":
            return
        split = "val" if self.plan.best_on_val else "test"
        for _, members in self._runs(clients):
            found = self._watch.find(snap["rows"], scores, clients, members, split, factor)
            if found is not None:
                client, where = self._client(clients[members[found.member]])
                raise DivergenceError(
                    f"{where}, round {round_idx}: {found.describe(split, factor)}. The run "
                    "diverged although its losses stayed finite. The learning rate is the likely "
                    "cause: lower it (federation.lr, or the algorithm's lr); "
                    "federation.divergence_factor: null keeps training. "
                    f"{self._kept(round_idx)}.", client=client, round_idx=round_idx)

    def _runs(self, clients: Tensor) -> list[tuple[int, Tensor]]:
        """The separate runs among the scored `clients`: (run, their positions in `clients`)."""
        return [(0, torch.arange(len(clients)))]

    def _client(self, position) -> tuple[int, str]:
        """The id of the client at engine `position`, and how a message names it."""
        client = self.data.client_id(position)
        return client, f"client {client}"

    def _kept(self, round_idx: int) -> str:
        """Which checkpoints survive a run stopped in round `round_idx`, as a sentence."""
        if self.store is None or round_idx == 0:
            return "Nothing was checkpointed yet"
        done = "round 0" if round_idx == 1 else f"rounds 0–{round_idx - 1}"
        return f"Checkpoints of {done} are intact in {self.store.uri}"

    # ---- evaluation ------------------------------------------------------------------------
    def _evaluate(self, snap: dict, round_idx: int) -> None:
        clients = self._eval_clients(round_idx)
        algo, full = self.algorithm, len(clients) == self.n_clients
        state = snap["state"] if full else select(snap["state"], clients)
        shared = {"global": snap["global"], "server": public(snap["server"])}
        adaptation = accounting.Tally(len(clients)) if algo.eval_phases() else None
        if adaptation is not None:
            state = vmap(algo.receive, in_dims=(None, 0, None))(snap["global"], state, shared)
            info = self._info(snap, round_idx, clients, state)
            for phase_idx, phase in enumerate(algo.eval_phases()):
                state, _ = self._train(state, info, phase, _EVAL_PHASES + phase_idx, shared,
                                       adaptation)
        models = vmap(algo.scored, in_dims=(0, None))(state, shared)
        first_row = len(snap["rows"])
        scores = self._scores(snap, round_idx, clients, models, shared)
        self._check_blowup(snap, scores, clients, round_idx)
        if adaptation is not None:
            accounting.mark_adaptation(snap["rows"][first_row:], clients, adaptation)
        selection.track(snap, scores, models, clients, self.plan.best_on_val)
        if full:
            selection.early_stop(snap, scores, self.plan.early_stop, self.data.val.counts)

    def _eval_clients(self, round_idx: int) -> Tensor:
        """Every client, or (``eval_clients: sampled``) the round's own between full sweeps."""
        plan = self.plan
        every = plan.full_eval_every
        if (plan.eval_clients == "all" or round_idx in (0, plan.rounds)
                or (every and round_idx % every == 0)):
            return self.all_clients
        return self._sample(round_idx)

    def _scores(self, snap: dict, round_idx: int, clients: Tensor, models: Tree, shared: Tree
                ) -> dict[str, Tensor]:
        """Loss and accuracy of every scored view on `clients` [C']; their rows go to `snap`."""
        algo = self.algorithm
        views = {"": (models, {}, member_predict(algo))}
        views.update({f"{view}_": (models, {}, member_predict(algo, view)) for view in algo.views})
        if self.plan.score_global:
            views["global_"] = ({}, {"model": algo.global_model(shared)}, forward_shared)
        keys = self._eval_keys(round_idx, clients)
        scores, ids = {}, clients.tolist()
        for split in ("val", "test"):
            for prefix, (member_models, common_model, predict) in views.items():
                loss, acc = self.score(self.ctx, predict, member_models, common_model,
                                       self.data.split(split), clients, keys=keys)
                scores[f"{prefix}{split}_loss"], scores[f"{prefix}{split}_accuracy"] = loss, acc
            columns = {f"{p}{m}": scores[f"{p}{split}_{m}"].tolist() for p in views
                       for m in ("loss", "accuracy")}
            snap["rows"] += [{"round": round_idx, "client": c, "split": split,
                              **{name: values[i] for name, values in columns.items()}}
                             for i, c in enumerate(ids)]
        scores["round"] = torch.full_like(scores["val_loss"], round_idx)
        return scores

    # ---- checkpoints ------------------------------------------------------------------------
    def _keep(self, global_params: Group, round_idx: int) -> None:
        """Keep a round's global model between checkpoints (`Plan.keep_every_round`)."""
        checkpoint.keep(self.store, global_params, round_idx)

    def _save(self, snap: dict, round_idx: int) -> None:
        if self.store is not None:
            checkpoint.save(self.store, snap, round_idx, self.fingerprint,
                            self.plan.keep_every_round)

    def _resume(self) -> dict | None:
        if self.store is None:
            return None
        return checkpoint.resume(self.store, self.fingerprint, self.all_clients.device)


def _optimizer(federation: OptimizerConfig, name: str | None) -> OptimizerConfig:
    """The federation's local optimizer, or the phase's own (`Phase.optimizer`).

    A phase's SGD keeps the federation's momentum; Adam has none.
    """
    if name is None or name == federation.name:
        return federation
    return dataclasses.replace(federation, name=name,
                               momentum=federation.momentum if name == "sgd" else 0.0)
