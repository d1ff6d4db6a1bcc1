"""Uncertainty beside the report's means: 95 % intervals, paired comparisons, answers they gate.

`assess` adds to each split's `SplitSummary` (which it never changes; the thesis's metrics and
vote stay as they are):

- **intervals**: a 95 % interval of every metric of every model (`PATHS`), over seeds where
  there are several and over clients where there is one (`pflpipe.metrics.uncertainty`);
- **two families of paired comparisons** among the personalized models, each Holm-corrected:
  per-client accuracy for the best-performing question (the paired difference of two models'
  accuracies is also that of their QoI, max(G, L) being shared) and Jain's index of QoI over U⁺
  for the fairest question (JI = CS², the scale-free measure of how evenly the improvement is
  shared; AV is in unit² and favours small improvements);
- **a verdict per question**: the thesis's vote names a leader (`pflpipe.metrics.summary.decide`);
  the leader is the answer only where the corrected test resolves it ahead of every other
  contender. Otherwise the answer is the set of models tied at the top: the leader and every
  contender the test does not separate from it (or finds ahead of it). Contenders: the
  personalized models; for the fairest question, those with a JI over U⁺ (an empty U⁺ cannot win).
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pflpipe.metrics.base import METRIC_REGISTRY
from pflpipe.metrics.performance import quantum_of_improvement
from pflpipe.metrics.resampled import replicates
from pflpipe.metrics.summary import PATHS, Decision, SplitSummary, score
from pflpipe.metrics.table import ResultsTable, Scores, scores_by_seed, select_rows
from pflpipe.metrics.uncertainty import (
    ALPHA,
    CLIENTS,
    LEVEL,
    RESAMPLES,
    Gap,
    Interval,
    bootstrapped,
    client_resamples,
    holm,
    over_clients,
    over_seeds,
    percentile_interval,
    t_interval,
    units_needed,
)

#: The quantity each question's paired test compares (a dotted path of `PATHS`).
QUESTIONS = {"best": "accuracy.AA", "fairest": "fairness.improved.JI"}
RULE = (
    "Uncertainty: every metric has a 95 % interval: over seeds (t-interval of the per-seed values) "
    "where there are several seeds, over clients (percentile bootstrap, "
    f"{RESAMPLES:,} resamples of the clients, seeded) where there is one; the latter says how much "
    "this run's clients vary, not whether another seed would agree. Each pair of personalized "
    "models is compared on per-client accuracy (Wilcoxon signed-rank over the clients of one "
    "seed; paired t over seeds) and on Jain's index of QoI over U⁺ (paired bootstrap over the "
    "clients of one seed; paired t over seeds), each family Holm-corrected over its pairs "
    f"(α = {ALPHA}); every p in the answers is Holm-corrected, while the intervals are not "
    "(and the accuracy test is on ranks, its interval on the mean): where an interval clears 0 "
    "but the corrected test does not, the test decides. The vote above names a leader; "
    "it is the answer only where the corrected test puts it ahead of every other contender, "
    "otherwise the answer is the models tied at the top. For a pair left unresolved, 'to "
    "resolve' is the size of a paired t-test at power 0.8 and Holm's strictest α / m: the "
    "smallest n' ≥ ((t_{1−α/2m, n'−1} + t_{0.8, n'−1}) · σ_d / |Δ|)², σ_d the spread of the "
    "per-unit differences observed (√n times the standard error of Δ), at least one more unit "
    "than compared."
)


@dataclass(frozen=True)
class Pair:
    """Two contenders compared on one quantity: a − b, Holm-corrected within its family."""

    a: str
    b: str
    metric: str
    gap: Gap
    p_holm: float
    needed: int | None = None

    @property
    def resolved(self) -> bool:
        """Whether the corrected test separates the two."""
        return self.p_holm < ALPHA

    @property
    def ahead(self) -> str | None:
        """The model the corrected test puts ahead (registry direction); None if unresolved."""
        if not self.resolved or self.gap.delta == 0:
            return None
        higher = METRIC_REGISTRY[self.metric.rsplit(".", 1)[1]].higher_is_better
        return self.a if (self.gap.delta > 0) == higher else self.b

    def to_json(self) -> dict:
        """Return the pair as a JSON-ready mapping (also a row of pairwise.csv)."""
        g = self.gap
        return {"metric": self.metric, "a": self.a, "b": self.b, "delta": g.delta,
                "ci_low": g.low, "ci_high": g.high, "p": g.p, "p_holm": self.p_holm, "n": g.n,
                "over": g.over, "test": g.test, "resolved": self.resolved, "ahead": self.ahead,
                "units_needed": self.needed}


@dataclass(frozen=True)
class Verdict:
    """The answer to one question once noise is accounted for.

    Attributes:
        leader: The thesis vote's model (None: undecided, see `reason`).
        top: The models tied at the top, the leader first; just the leader when resolved.
        pairs: Every pair of contenders compared, Holm-corrected together.

    """

    question: str
    metric: str
    leader: str | None
    top: tuple[str, ...]
    pairs: tuple[Pair, ...]
    reason: str | None = None

    @property
    def winner(self) -> str | None:
        """The model named, only where the corrected test resolves it."""
        return self.top[0] if len(self.top) == 1 else None

    def against(self, model: str) -> Pair | None:
        """The leader's pair with `model`."""
        return next((p for p in self.pairs if {p.a, p.b} == {self.leader, model}), None)

    def to_json(self) -> dict:
        """Return the verdict as a JSON-ready mapping."""
        return {"metric": self.metric, "leader": self.leader, "winner": self.winner,
                "top": list(self.top), "resolved": self.winner is not None,
                "reason": self.reason, "pairs": [p.to_json() for p in self.pairs]}


@dataclass(frozen=True)
class Assessment:
    """A split's intervals and verdicts; `over` says which units they are over."""

    split: str
    unit: str
    over: str
    n: int
    intervals: dict[str, dict[str, Interval]]
    best: Verdict
    fairest: Verdict

    @property
    def pairs(self) -> list[Pair]:
        """Every pair of both families."""
        return [*self.best.pairs, *self.fairest.pairs]

    def to_json(self) -> dict:
        """Return report.json's "uncertainty" entry of the split."""
        return {"over": self.over, "n": self.n, "level": LEVEL, "alpha": ALPHA,
                "resamples": RESAMPLES if self.over == CLIENTS else None,
                "intervals": {m: {p: i.to_json() for p, i in paths.items()}
                              for m, paths in self.intervals.items()},
                "verdicts": {"best": self.best.to_json(), "fairest": self.fairest.to_json()}}


def assess(table: ResultsTable, summaries: Mapping[str, SplitSummary], *, local: str = "local",
           global_: str = "fedavg", selection: str = "best_val") -> dict[str, Assessment]:
    """Add intervals and gated verdicts to every split's summary (see the module docstring)."""
    rows = select_rows(table, selection)
    return {split: _assess(summary, scores_by_seed(rows, split, ()), local, global_)
            for split, summary in summaries.items()}


def _assess(summary: SplitSummary, per_seed: list[Scores], local: str, global_: str
            ) -> Assessment:
    models = list(summary.models)
    errors = summary.unit == "neg_mse"
    if len(per_seed) > 1:
        values = {m: [score(s.accuracy[m], _qoi(s, m, summary, local, global_),
                            summary.models[m].role, s.n_samples, errors=errors)[0]
                      for s in per_seed] for m in models}
        intervals = {m: {p: _seed_interval([v[p] for v in values[m]]) for p in PATHS}
                     for m in models}

        def gap(a: str, b: str, path: str) -> Gap | None:
            return over_seeds([v[path] for v in values[a]], [v[path] for v in values[b]])
        over, n = "seeds", len(per_seed)
    else:
        seed, resamples = per_seed[0], client_resamples(len(per_seed[0].clients))
        replicates = {m: _replicates(seed, m, summary, local, global_, resamples, errors)
                      for m in models}
        intervals = {m: {p: _client_interval(replicates[m][p], len(seed.clients))
                         for p in PATHS} for m in models}

        def gap(a: str, b: str, path: str) -> Gap | None:
            if path == QUESTIONS["best"]:
                return over_clients(seed.accuracy[a], seed.accuracy[b], resamples)
            return bootstrapped(summary.models[a].mean[path], summary.models[b].mean[path],
                                replicates[a][path], replicates[b][path], len(seed.clients))
        over, n = CLIENTS, len(seed.clients)
    candidates = [m for m in models if summary.models[m].is_personalized]
    fair = [m for m in candidates if summary.models[m].mean[QUESTIONS["fairest"]] is not None]
    return Assessment(summary.split, summary.unit, over, n, intervals,
                      verdict(summary.best, candidates, QUESTIONS["best"], summary, gap),
                      verdict(summary.fairest, fair, QUESTIONS["fairest"], summary, gap))


def verdict(decision: Decision, contenders: list[str], metric: str, summary: SplitSummary,
            gap: Callable[[str, str, str], Gap | None]) -> Verdict:
    """Compare every pair of `contenders` on `metric` (Holm), then gate the vote's leader."""
    if decision.model is None:
        return Verdict(decision.question, metric, None, (), (), decision.reason)
    leader = decision.model
    contenders = list(dict.fromkeys([*contenders, leader]))
    higher = METRIC_REGISTRY[metric.rsplit(".", 1)[1]].higher_is_better
    means = {m: summary.models[m].mean[metric] for m in contenders}
    ranked = sorted(contenders, key=lambda m: (  # best mean first; on a tie, the leader
        math.inf if means[m] is None else -means[m] if higher else means[m], m != leader, m))
    pairs = compare(ranked, metric, gap)
    return Verdict(decision.question, metric, leader, top_with(leader, ranked, pairs), pairs)


def top_with(leader: str, ranked: Sequence[str], pairs: Sequence[Pair]) -> tuple[str, ...]:
    """The models tied at the top with `leader`: it, then every model of `ranked` it does not beat.

    A model is beaten where the corrected test resolves `leader` ahead of it.

    >>> from pflpipe.metrics.uncertainty import Gap
    >>> gap = Gap(0.05, 0.01, 0.09, 0.01, 0.02, 10, "clients", "Wilcoxon signed-rank")
    >>> pairs = [Pair("a", "b", "accuracy.AA", gap, 0.01), Pair("a", "c", "accuracy.AA", gap, 0.2)]
    >>> top_with("a", ["a", "b", "c"], pairs)
    ('a', 'c')
    """
    beaten = {p.b if p.a == leader else p.a for p in pairs
              if p.ahead == leader and leader in (p.a, p.b)}
    return (leader, *(m for m in ranked if m != leader and m not in beaten))


def compare(ranked: Sequence[str], metric: str, gap: Callable[[str, str, str], Gap | None]
            ) -> tuple[Pair, ...]:
    """Every pair of `ranked` (a before b), its `gap`, Holm-corrected together.

    A pair the corrected test leaves unresolved gets `units_needed` at Holm's strictest α / m.
    """
    tested = [(a, b, g) for i, a in enumerate(ranked) for b in ranked[i + 1:]
              if (g := gap(a, b, metric)) is not None]
    adjusted = holm([g.p for _, _, g in tested])
    return tuple(Pair(a, b, metric, g, p, None if p < ALPHA else
                      units_needed(g.delta, g.se, g.n, ALPHA / len(tested)))
                 for (a, b, g), p in zip(tested, adjusted, strict=True))


def compare_cells(cells: Mapping[str, np.ndarray], metric: str = "accuracy.AA"
                  ) -> tuple[Pair, ...]:
    """Compare every pair of models by their per-client scores, Holm-corrected together.

    `cells` holds each model's [S, K] scores (seeds × clients, the same clients in the same
    order for every model); their mean is the model's mean client score. Over seeds (paired t
    on the per-seed means) when S ≥ 2, else over the clients (Wilcoxon, bootstrap interval), as
    the report compares accuracy. Models are ranked by their mean, best first.
    """
    arrays = {m: np.atleast_2d(np.asarray(c, dtype=float)) for m, c in cells.items()}
    ranked = sorted(arrays, key=lambda m: -arrays[m].mean())
    seeds, clients = next(iter(arrays.values())).shape
    resamples = client_resamples(clients)

    def gap(a: str, b: str, _: str) -> Gap | None:
        if seeds > 1:
            return over_seeds(arrays[a].mean(axis=1).tolist(), arrays[b].mean(axis=1).tolist())
        return over_clients(arrays[a][0], arrays[b][0], resamples)
    return compare(ranked, metric, gap)


def _qoi(seed: Scores, model: str, summary: SplitSummary, local: str, global_: str
         ) -> np.ndarray | None:
    if not summary.models[model].is_personalized:
        return None
    return quantum_of_improvement(seed.accuracy[model], seed.accuracy[global_],
                                  seed.accuracy[local])


def _replicates(seed: Scores, model: str, summary: SplitSummary, local: str, global_: str,
                resamples: np.ndarray, errors: bool) -> dict[str, np.ndarray]:
    """Every metric of `model` on each client resample (NaN where undefined), all at once."""
    return replicates(seed.accuracy[model], _qoi(seed, model, summary, local, global_),
                      seed.n_samples, resamples, errors=errors)


def _seed_interval(values: list[float | None]) -> Interval:
    defined = [v for v in values if v is not None and math.isfinite(v)]
    if len(defined) < 2:
        return Interval(None, None, "seeds", len(defined),
                        "defined on fewer than 2 seeds: no interval over seeds")
    return Interval(*t_interval(defined), "seeds", len(defined))


def _client_interval(replicates: np.ndarray, n_clients: int) -> Interval:
    defined = int(np.isfinite(replicates).sum())
    if defined < len(replicates) / 2:
        return Interval(None, None, CLIENTS, n_clients,
                        f"defined on {defined} of {len(replicates):,} client resamples")
    return Interval(*percentile_interval(replicates), CLIENTS, n_clients)

