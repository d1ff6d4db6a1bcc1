"""Repetitions of one experiment as one federation: R independent federations of M clients.

A paper's "repeated 200 times" becomes R × M members of one engine computation instead of a loop
of runs. `Repeated` wraps an algorithm: client c belongs to repetition c // M; the server keeps
each repetition's global model and server state stacked [R, ...] (server state group
``"global"``); every server-side hook of the wrapped algorithm runs once per repetition, vmapped,
on a `Round` of that repetition's clients only (ids 0..M−1, ``n_clients`` M); its client-side
hooks see their own repetition's global model and server state as ``shared``. The federation's
plan must sample each repetition apart (``Plan(blocks=R)``) and skip the global-model scores
(``score_global=False``): there is one global model per repetition, in
``result.server["global"]``.
"""

import dataclasses

import torch
from torch.func import vmap

from pflpipe.engine.protocol import AlgorithmProtocol, Phase, Round, default
from pflpipe.engine.tree import broadcast, merge, tree_map

#: Key that marks a group as sent by `Repeated.dispatch` (not the engine's shared global model).
_SENT = "repetition.sent"


class Repeated:
    """`algorithm` run in `repetitions` independent federations at once."""

    kept, predict_with, views, has_global_model = (), "model", (), False

    def __init__(self, algorithm: AlgorithmProtocol, repetitions: int):
        self.params, self.head = algorithm.params, algorithm.head
        self.lr, self.local_epochs = algorithm.lr, algorithm.local_epochs
        self.inner, self.repetitions = algorithm, repetitions
        self._wrapped = {}   # the wrapped algorithm's objectives, each wrapped once

    def modules(self, in_shape, n_outputs, model=None):
        """No extra networks."""
        return {}

    # ---- server side: the wrapped hooks once per repetition ---------------------------------
    def init_server(self, global_params, n_clients):
        """Each repetition's global model and the wrapped algorithm's server state [R, ...]."""
        inner = self.inner.init_server(global_params, n_clients // self.repetitions)
        return {name: broadcast(group, self.repetitions)
                for name, group in {"global": global_params, **inner}.items()}

    def init_clients(self, global_params, n_clients):
        """The wrapped algorithm's kept groups, and each client's repetition."""
        index = torch.arange(n_clients) // (n_clients // self.repetitions)
        return {**self.inner.init_clients(global_params, n_clients),
                "repetition": {"index": index.to(next(iter(global_params.values())).device)}}

    def dispatch(self, round):
        """What the wrapped algorithm sends (its repetition's global model by default)."""
        def one(inner, r):
            sent = inner.dispatch(r)
            return dict(sent if sent is not None else broadcast(r.global_params, len(r.clients)))

        sent = {k: v.flatten(0, 1) for k, v in self._per_repetition(round, one).items()}
        return {**sent, _SENT: torch.ones(len(round.clients), device=round.clients.device)}

    def schedule(self, round, phase, steps, lr):
        """The wrapped algorithm's steps and learning rates, repetition by repetition."""
        blocks = self._blocks(round)
        steps, lr = self._per_repetition(
            round, lambda inner, r, s, x: inner.schedule(r, phase, s, x),
            steps.view(blocks, -1), lr.view(blocks, -1))
        return steps.flatten(), lr.flatten()

    def server_step(self, round):
        """Each repetition's new global model and server state; the engine's global is unused."""
        def one(inner, r):
            new_global, server = inner.server_step(r)
            return {"global": merge(r.global_params, new_global), **server}

        return {}, self._per_repetition(round, one)

    def _blocks(self, round) -> int:
        blocks = self.repetitions
        size = round.n_clients // blocks
        index = round.clients.view(blocks, -1) // size if len(round.clients) % blocks == 0 else None
        if index is None or not torch.equal(
                index, torch.arange(blocks, device=index.device).view(-1, 1).expand_as(index)):
            raise ValueError(f"the round's clients are not {blocks} equal repetitions of {size}; "
                             f"run the federation with Plan(blocks={blocks})")
        return blocks

    def _per_repetition(self, round, fn, *extra):
        """fn(algorithm, Round of one repetition, *extra) for every repetition (vmapped): [R, ...].

        The algorithm is the wrapped one, the same for every repetition.
        """
        blocks, size = self._blocks(round), round.n_clients // self.repetitions
        server = {name: group for name, group in round.server.items() if name != "global"}

        def one(global_params, server, states, clients, counts, *args):
            view = Round(round.index, clients % size, counts, size, global_params, server, states)
            return fn(self.inner, view, *args)

        split = tree_map(lambda t: t.view(blocks, -1, *t.shape[1:]), round.states)
        return vmap(one)(round.server["global"], server, split, round.clients.view(blocks, -1),
                         round.counts.view(blocks, -1), *extra)

    # ---- client side: the wrapped hooks, seeing their own repetition ------------------------
    def _local(self, shared, state):
        """``shared`` of the client's repetition: its global model and server state."""
        index = state["repetition"]["index"]
        pick = {name: {k: v[index] for k, v in group.items()}
                for name, group in shared["server"].items()}
        return {"global": pick.pop("global"), "server": pick}

    def _own(self, state):
        """The wrapped algorithm as the client of `state` runs it (every client: the same)."""
        return self.inner

    def _objective(self, fn):
        """`fn` seeing its repetition's ``shared`` (the same callable for the same `fn`).

        A method of the wrapped algorithm runs as the client's own (`_own`).
        """
        if fn not in self._wrapped:
            def objective(state, batch, shared, hp, ctx):
                own = fn
                if getattr(fn, "__self__", None) is self.inner:
                    own = getattr(self._own(state), fn.__name__)
                return own(state, batch, self._local(shared, state), hp, ctx)

            self._wrapped[fn] = objective
        return self._wrapped[fn]

    def _phase(self, phase: Phase) -> Phase:
        """`phase` with its objectives seeing their repetition's ``shared``."""
        if phase.objective is None and not phase.then:
            return phase
        return dataclasses.replace(
            phase, objective=None if phase.objective is None else self._objective(phase.objective),
            then=tuple((self._objective(fn), train) for fn, train in phase.then))

    def receive(self, global_params, previous, shared=None):
        """The wrapped receive, from what dispatch sent or else the repetition's global model."""
        local = self._local(shared, previous)
        start = ({k: v for k, v in global_params.items() if k != _SENT}
                 if _SENT in global_params else local["global"])
        return {**self._own(previous).receive(start, previous, local),
                "repetition": previous["repetition"]}

    def phases(self):
        """The wrapped algorithm's phases."""
        return tuple(self._phase(phase) for phase in self.inner.phases())

    def eval_phases(self):
        """The wrapped algorithm's evaluation phases."""
        return tuple(self._phase(phase) for phase in self.inner.eval_phases())

    def is_payload(self, key):
        """The wrapped algorithm's payload keys."""
        return self.inner.is_payload(key)

    def local_objective(self, state, batch, shared, hp, ctx):
        """The wrapped local objective."""
        return self._objective(self.inner.local_objective)(state, batch, shared, hp, ctx)

    def finish(self, start, trained, shared):
        """The wrapped finish."""
        return {**self._own(start).finish(start, trained, self._local(shared, start)),
                "repetition": start["repetition"]}

    @default
    def diagnostics(self, state, shared, batch, ctx):
        """None recorded."""
        return {}

    @default
    def server_diagnostics(self, round, server):
        """None recorded."""
        return {}

    def scored(self, state, shared):
        """The wrapped personalized model."""
        return self._own(state).scored(state, self._local(shared, state))

    def predict(self, model, x, ctx, key):
        """The wrapped prediction."""
        return self.inner.predict(model, x, ctx, key)

    def global_model(self, shared):
        """Not one model: each repetition has its own (``result.server["global"]``)."""
        raise ValueError("Repeated has one global model per repetition (result.server['global'])"
                         "; run it with Plan(score_global=False)")

