"""Runs as members: K separate runs of one stage (its seeds) as one batched federation.

The runs are a stage's seeds, and may be hyper-parameter variants of its algorithm too (entries
of one algorithm that differ in its `member_params`, a tuning grid's points:
`pflpipe.engine.variants`). Every run keeps its own partition, initial model, seed, random
stream and hyper-parameters; the runs' clients are stacked into one
federation of K × M clients (run k owns clients k·M … k·M + M − 1) and every local step trains
the clients of all runs at once. Each run ends with exactly the numbers it has alone, to the bit:

- every random draw is keyed as the run alone keys it: by the run's seed and stream and the
  client's id within its run (mini-batch orders, noise, the sampled clients, evaluation keys,
  server draws);
- local training is one vmapped step over all runs' members (a member's arithmetic does not
  depend on how many members share the step);
- the server-side hooks run run by run, a loop of K (`Members`), each with its run's algorithm:
  a vmapped reduction over [K, M] clients sums in another order than one over [M], and a server
  step is cheap; client hooks see their run's varying hyper-parameters as 0-d tensors;
- each run's clients are scored apart (evaluation reads its chunks by the run's largest client).

`combine` builds the federation from the runs' recipes; `MemberFederation.run_members` returns
each run's `FederationResult` as the run alone returns it. What it cannot run as members it
refuses, naming why: runs of unequal client counts, early stopping (each run stops on its own
validation loss), a server optimizer, algorithms with extra networks or diagnostics.
"""

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from pflpipe.engine import accounting, checkpoint, variants
from pflpipe.engine.accounting import Reads
from pflpipe.engine.data import FederatedData, SplitData, member_seed
from pflpipe.engine.evaluate import evaluate
from pflpipe.engine.federation import _EVAL_SALT, _SERVER_SALT, Federation, FederationResult, Plan
from pflpipe.engine.noise import step_keys
from pflpipe.engine.protocol import AlgorithmProtocol, Round, overridden
from pflpipe.engine.repetitions import Repeated
from pflpipe.engine.tree import Group, Tree, tree_map
from pflpipe.errors import DataError
from pflpipe.storage.store_protocol import Store

#: The group `Repeated` adds to each client's state: the client's run.
RUN_GROUP = "repetition"


def _stack(parts: list):
    """Stack a list of equally shaped (nested dicts/tuples of) tensors along a new first axis."""
    first = parts[0]
    if isinstance(first, Tensor):
        return torch.stack(parts)
    if isinstance(first, dict):
        return {k: _stack([p[k] for p in parts]) for k in first}
    return type(first)(_stack(list(p)) for p in zip(*parts, strict=True))


def _pick(tree, index):
    """Entry `index` of every tensor of a nested dict."""
    if isinstance(tree, Tensor):
        return tree[index]
    return {k: _pick(v, index) for k, v in tree.items()}


def _own(tree):
    """A copy of a nested dict of tensors with storages of their own (saved as a run saves it)."""
    if isinstance(tree, Tensor):
        return tree.clone()
    return {k: _own(v) for k, v in tree.items()}


class Members(Repeated):
    """`algorithms` run as separate federations, one per run, with equal clients.

    Run k has its own seed, random stream and algorithm: the runs' algorithms are of one class
    and differ at most in its `member_params` (hyper-parameter variants, grid points).
    """

    def __init__(self, algorithms: Sequence[AlgorithmProtocol], seeds: Sequence[int],
                 streams: Sequence[int]):
        algorithm = algorithms[0]
        if overridden(algorithm, "modules"):
            raise DataError(f"{type(algorithm).__name__} builds networks of its own (modules), "
                            "which its runs cannot share as members; set "
                            "engine.seeds_as_members: false")
        super().__init__(algorithm, len(seeds))
        self.varying = variants.varying(algorithms)   # first: it refuses runs unlike the first
        self.inners, self.seeds, self.streams = list(algorithms), tuple(seeds), tuple(streams)
        self.views, self.has_global_model = algorithm.views, algorithm.has_global_model
        self.received = 0   # bytes one client of one run downloads per round (`server_step`)

    def member_values(self, index: Tensor) -> Group:
        """Each client's value of every varying hyper-parameter (`variants`) [C]."""
        return variants.values(self.inners, self.varying, index)

    def _own(self, state):
        """The algorithm of the client's run: its varying hyper-parameters as 0-d tensors."""
        if not self.varying:
            return self.inner
        return variants.view(self.inner, {name: state[RUN_GROUP][name] for name in self.varying})

    def _per_repetition(self, round, fn, *extra):
        """fn(run's algorithm, Round of one run, *extra) run by run: [K, ...] (module's doc)."""
        blocks, size = self._blocks(round), round.n_clients // self.repetitions
        server = {name: group for name, group in round.server.items() if name != "global"}
        outs = []
        for b in range(blocks):
            rows = slice(b * len(round.clients) // blocks, (b + 1) * len(round.clients) // blocks)
            states = Reads({g: {k: v[rows] for k, v in group.items()}
                            for g, group in dict.items(round.states)})
            view = Round(round.index, round.clients[rows] % size, round.counts[rows], size,
                         _pick(round.server["global"], b), _pick(server, b), states,
                         member_seed(self.seeds[b], self.streams[b], round.index, _SERVER_SALT))
            outs.append(fn(self.inners[b], view, *(e[b] for e in extra)))
            if isinstance(round.states, Reads):   # the run's server step read these groups
                for group in states.read:
                    round.states.get(group)
        return _stack(outs)

    def server_step(self, round):
        """Each run's new global model and server state; counts what a client downloads."""
        def one(inner, r):
            new_global, server = inner.server_step(r)
            self.received = accounting.received_bytes(new_global, server)
            return {"global": {**r.global_params, **new_global}, **server}

        return {}, self._per_repetition(round, one)

    def global_model(self, shared):
        """Each run's global model [K, ...] (scored run by run: `MemberFederation.score`)."""
        server = {name: group for name, group in shared["server"].items() if name != "global"}
        return _stack([inner.global_model({"global": _pick(shared["server"]["global"], b),
                                           "server": _pick(server, b)})
                       for b, inner in enumerate(self.inners)])

    def _server_diagnostics(self, round, server):
        """The wrapped server diagnostics, run by run [K·M, ...]."""
        size, runs = round.n_clients // self.repetitions, self.repetitions
        per_run = []
        for b in range(runs):
            rows = slice(b * len(round.clients) // runs, (b + 1) * len(round.clients) // runs)
            view = Round(round.index, round.clients[rows] % size, round.counts[rows], size,
                         _pick(round.server["global"], b),
                         _pick({n: g for n, g in round.server.items() if n != "global"}, b),
                         {g: {k: v[rows] for k, v in group.items()}
                          for g, group in dict.items(round.states)})
            per_run.append(self.inners[b].server_diagnostics(
                view, _pick({n: g for n, g in server.items() if n != "global"}, b)))
        return {name: torch.cat([d[name] for d in per_run]) for name in per_run[0]}

    def predict(self, model, x, ctx, key, view: str = ""):
        """The wrapped prediction (of `view`, when given)."""
        if view:
            return self.inner.predict(model, x, ctx, key, view=view)
        return self.inner.predict(model, x, ctx, key)


def members_of(algorithms: Sequence[AlgorithmProtocol], seeds: Sequence[int],
               streams: Sequence[int]) -> Members:
    """`Members` of `algorithms` (one per run), with their diagnostics when they define them."""
    hooks, algorithm = {}, algorithms[0]
    if overridden(algorithm, "diagnostics"):
        def diagnostics(self, state, shared, batch, ctx):
            """The wrapped diagnostics, seeing the client's own run."""
            return self._own(state).diagnostics(state, self._local(shared, state), batch, ctx)

        hooks["diagnostics"] = diagnostics
    if overridden(algorithm, "server_diagnostics"):
        hooks["server_diagnostics"] = Members._server_diagnostics
    cls = type("Members", (Members,), hooks) if hooks else Members
    return cls(algorithms, seeds, streams)


class MemberFederation(Federation):
    """A federation of `Members`: each run's draws, scores and kept rounds as the run's own.

    `rounds_to`: one store per run (the run's own checkpoint store) that receives the run's
    global model of every kept round (``Plan.keep_every_round``) and, at the end, the run's
    final checkpoint under its own `fingerprints`, as the run alone leaves it: a later run of
    that seed alone finds it finished and trains nothing.
    """

    def __init__(self, algorithm: Members, ctx, data: FederatedData, trainer, plan: Plan,
                 store: Store | None = None, fingerprint: str = "", on_round=None, *,
                 inits: Sequence[Group], rounds_to: Sequence[Store] | None = None,
                 fingerprints: Sequence[str] = ()):
        if plan.early_stop is not None:
            raise DataError("federation.early_stop: each run stops on its own validation loss, "
                            "so runs with early stopping cannot train as members; set "
                            "engine.seeds_as_members: false")
        optimizer = getattr(algorithm.inner, "server_optimizer", None)   # FedAvg's server rule's
        if optimizer is not None and not optimizer.is_identity:
            raise DataError("federation.server_optimizer: runs with a server optimizer cannot "
                            "train as members; set engine.seeds_as_members: false")
        if plan.blocks != algorithm.repetitions or data.first_client or data.whole_clients:
            raise ValueError("a member federation needs Plan(blocks=runs) and whole data")
        super().__init__(algorithm, ctx, data, trainer, plan, store, fingerprint, on_round)
        self.size = self.n_clients // algorithm.repetitions
        self.inits, self.rounds_to, self._server = list(inits), rounds_to, None
        self.fingerprints = list(fingerprints)

    def run_members(self) -> list[FederationResult]:
        """Run (or resume) the rounds; each run's result as it is alone."""
        result = self.run(self.inits[0])
        results = [self._result_of(result, b) for b in range(self.algorithm.repetitions)]
        for store, fingerprint, own in zip(self.rounds_to or (), self.fingerprints, results,
                                           strict=False):
            checkpoint.save(store, _snapshot(own), own.rounds_completed, fingerprint,
                            self.plan.keep_every_round)
        return results

    # ---- each run's own start, seeds and scores ------------------------------------------
    def _initial(self, init_global: Group) -> tuple[Tree, Tree]:
        inners, size = self.algorithm.inners, self.size
        device = next(iter(init_global.values())).device
        servers = [tree_map(lambda v: v.to(device), inner.init_server(init, size))
                   for inner, init in zip(inners, self.inits, strict=True)]
        kept = [tree_map(lambda v: v.to(device), inner.init_clients(init, size))
                for inner, init in zip(inners, self.inits, strict=True)]
        server = _stack([{"global": dict(init), **s} for init, s in zip(self.inits, servers,
                                                                          strict=True)])
        clients = {g: {k: torch.cat([part[g][k] for part in kept]) for k in kept[0][g]}
                   for g in kept[0]}
        model = {k: torch.cat([init[k].expand(size, *init[k].shape) for init in self.inits])
                 for k in init_global}
        index = torch.arange(self.n_clients, device=device) // size
        return server, {"model": model, **clients,
                        RUN_GROUP: {"index": index, **self.algorithm.member_values(index)}}

    def _seed(self, round_idx: int, client: int, salt: int) -> int:
        run, local = divmod(int(client), self.size)
        return member_seed(self.algorithm.seeds[run], self.algorithm.streams[run], round_idx,
                           local, salt)

    def _eval_keys(self, round_idx: int, clients: Tensor) -> Tensor:
        keys = torch.stack([step_keys([member_seed(seed, stream, round_idx, _EVAL_SALT)],
                                      self.size)[0]
                            for seed, stream in zip(self.algorithm.seeds, self.algorithm.streams,
                                                    strict=True)])
        clients = clients.cpu()
        return keys[clients // self.size, clients % self.size]

    def _sample(self, round_idx: int) -> Tensor:
        if self.plan.client_fraction >= 1.0:
            return self.all_clients
        chosen = []
        for run, (seed, stream) in enumerate(zip(self.algorithm.seeds, self.algorithm.streams,
                                                 strict=True)):
            alone = dataclasses.replace(self.plan, seed=seed, stream=stream, blocks=1)
            chosen.append(run * self.size + Federation._sample(
                _Sampler(alone, self.size, self.all_clients.device), round_idx))
        return torch.cat(chosen)

    def score(self, ctx, predict, members: Tree, common: Tree, split: SplitData,
              clients: Tensor, keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """`evaluate` run by run (a common model [K, ...] is each run's own)."""
        loss, accuracy = (torch.empty(len(clients), device=split.x.device) for _ in range(2))
        runs = clients // self.size
        for run in range(self.algorithm.repetitions):
            rows = (runs == run).nonzero().flatten()
            if not len(rows):
                continue
            run_members = tree_map(lambda t, rows=rows: t[rows], members)
            run_common = _pick(common, run) if common else common
            loss[rows], accuracy[rows] = evaluate(ctx, predict, run_members, run_common, split,
                                                  clients[rows], keys=keys[rows])
        return loss, accuracy

    def _runs(self, clients: Tensor) -> list[tuple[int, Tensor]]:
        """Each run's clients among `clients` apart: a run diverges on its own."""
        runs = (clients // self.size).cpu()
        return [(run, (runs == run).nonzero().flatten()) for run in runs.unique().tolist()]

    def _client(self, position) -> tuple[int, str]:
        """A client by its id within its run, and the run's seed."""
        run, client = divmod(int(position), self.size)
        return client, f"client {client} (seed {self.algorithm.seeds[run]}, member {run})"

    # ---- each run's kept rounds and download bytes -----------------------------------------
    def _round(self, snap: dict, round_idx: int) -> None:
        first = len(snap["rows"])
        super()._round(snap, round_idx)
        for row in snap["rows"][first:]:
            row["bytes_received"] = self.algorithm.received
        self._server = snap["server"]

    def _keep(self, global_params: Group, round_idx: int) -> None:
        self._keep_runs(self._server["global"], round_idx)

    def _save(self, snap: dict, round_idx: int) -> None:
        super()._save(snap, round_idx)
        if self.plan.keep_every_round or round_idx == self.plan.rounds or snap["stopped"]:
            self._keep_runs(snap["server"]["global"], round_idx)

    def _keep_runs(self, stacked: Group, round_idx: int) -> None:
        for run, store in enumerate(self.rounds_to or ()):
            checkpoint.keep(store, _own(_pick(stacked, run)), round_idx)

    def _result_of(self, result: FederationResult, run: int) -> FederationResult:
        """Run `run`'s part of the members' result, as the run alone returns it."""
        size = self.size
        rows = slice(run * size, (run + 1) * size)

        def part(tree: Tree) -> Tree:
            return {g: {k: v[rows].clone() for k, v in group.items()}
                    for g, group in tree.items() if g != RUN_GROUP}

        server = {name: _own(_pick(group, run)) for name, group in result.server.items()}
        global_params = server.pop("global")
        own = [{**row, "client": row["client"] - run * size} for row in result.rows
               if row["client"] // size == run]
        return FederationResult(
            global_params, part(result.state), part(result.best_model),
            {k: v[rows] for k, v in result.best.items()},
            {k: v[rows] for k, v in result.last.items()}, own, result.rounds_completed,
            result.stopped_early, server, part(result.last_model))


def _snapshot(result: FederationResult) -> dict:
    """The engine's snapshot after the last round of a run that ended with `result`."""
    return {"round": result.rounds_completed, "global": result.global_params,
            "server": result.server, "state": result.state, "rows": result.rows,
            "stopped": result.stopped_early, "early": {"best": float("inf"), "bad": 0},
            "last": result.last, "best": result.best,
            "best_model": result.best_model, "last_model": result.last_model}


class _Sampler:
    """What `Federation._sample` reads of a federation: one run's plan, clients and device."""

    def __init__(self, plan: Plan, n_clients: int, device: torch.device):
        self.plan, self.n_clients = plan, n_clients
        self.all_clients = torch.arange(n_clients, device=device)


def concat(datas: Sequence[FederatedData]) -> FederatedData:
    """The runs' clients as one federation's, run after run."""
    def split(name: str) -> SplitData:
        parts = [d.split(name) for d in datas]
        if any(p.extra for p in parts):
            raise ValueError("runs with per-sample extra fields cannot be joined")
        counts = torch.cat([p.counts.cpu() for p in parts])
        offsets = torch.zeros(len(counts) + 1, dtype=torch.long)
        offsets[1:] = counts.cumsum(0)
        return SplitData(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]),
                         offsets.to(parts[0].offsets.device))

    return FederatedData(split("train"), split("val"), split("test"))


def combine(recipes: Sequence, seeds: Sequence[int], store: Store | None, fingerprint: str,
            on_round: Callable | None = None, rounds_to: Sequence[Store] | None = None
            ) -> MemberFederation:
    """The member federation of the runs `recipes` (`pflpipe.engine.distributed.Recipe`).

    Their plans must be equal but for the seed and the random stream; every run must have as
    many clients; their algorithms may differ in their class's `member_params` alone
    (`pflpipe.engine.variants`: hyper-parameter variants, grid points).
    """
    first = recipes[0]
    counts = [r.data.n_clients for r in recipes]
    if len(set(counts)) > 1:
        named = ", ".join(f"seed {s}: {n}" for s, n in zip(seeds, counts, strict=True))
        raise DataError(f"the seeds' partitions have different client counts ({named}); runs "
                        "train as members only with equal counts: set "
                        "engine.seeds_as_members: false")
    plans = {dataclasses.replace(r.plan, seed=0, stream=0) for r in recipes}
    if len(plans) > 1:
        raise ValueError("runs train as members only when their plans differ in the seed and "
                         "the random stream alone")
    plan = dataclasses.replace(first.plan, seed=seeds[0], blocks=len(recipes))
    algorithm = members_of([r.algorithm for r in recipes], seeds, [r.plan.stream for r in recipes])
    return MemberFederation(algorithm, first.ctx, concat([r.data for r in recipes]),
                            first.trainer, plan, store, fingerprint, on_round,
                            inits=[r.init for r in recipes], rounds_to=rounds_to,
                            fingerprints=[r.fingerprint for r in recipes])
