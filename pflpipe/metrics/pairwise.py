"""Uncertainty beside the report's means: 95 % intervals, paired comparisons, answers they gate.

`assess` adds to each split's `SplitSummary` (which it never changes; the thesis's metrics and
vote stay as they are):

- **intervals**: a 95 % interval of every metric of every model (`PATHS`), over seeds where
  there are several and over clients where there is one (`pflpipe.metrics.uncertainty`);
- **three families of paired comparisons**, each Holm-corrected over its own pairs: among the
  personalized models, per-client accuracy for the best-performing question (the paired
  difference of two models' accuracies is also that of their QoI, max(G, L) being shared) and
  Jain's index of QoI over U⁺ for the fairest question (JI = CS², the scale-free measure of how
  evenly the improvement is shared; AV is in unit² and favours small improvements); and every
  personalized model against the global and the local baseline on per-client accuracy (the
  thesis's own question: does personalizing beat FedAvg, and training alone?);
- **a verdict per question** (`Verdict.status`): the thesis's vote names a leader
  (`pflpipe.metrics.summary.decide`). It is the answer ("resolved") only where, over two or
  more seeds, the corrected test puts it ahead of every other contender. Otherwise the answer is
  the set of models tied at the top: the leader and every contender the test does not separate
  from it ("tied"). With one seed the tests run over the clients and see no training noise, so
  no model is separated ("training noise not measured": every contender is at the top, and the
  sentence says what the clients show). A lone contender has nothing to compare with ("nothing
  to compare"). Contenders: the personalized models; for the fairest question, those with a JI
  over U⁺ (an empty U⁺ cannot win).

Each pair's interval is the one its test inverts, at the level Holm's step-down tested it at
(`compare`): it excludes 0 exactly when the pair is resolved.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pflpipe.metrics.inversion import signed_rank_units
from pflpipe.metrics.metric_registry import METRIC_REGISTRY
from pflpipe.metrics.performance import quantum_of_improvement
from pflpipe.metrics.resampled import replicates
from pflpipe.metrics.results_table import ResultsTable, Scores, scores_by_seed, select_rows
from pflpipe.metrics.summary import PATHS, Decision, SplitSummary, score
from pflpipe.metrics.uncertainty import (
    ALPHA,
    CLIENTS,
    LEVEL,
    MIN_SEEDS,
    NO_SPREAD,
    RESAMPLES,
    SEEDS,
    SIGNED_RANK,
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
    "this run's clients vary, not whether another seed would agree. A metric without spread (one "
    "unit, or all alike) has no interval. Each pair of personalized models is compared on "
    "per-client accuracy (over the clients of one seed: Wilcoxon's signed-rank test, Δ its "
    "Hodges–Lehmann estimate; over seeds: the paired t-test on the per-seed means) and on Jain's "
    "index of QoI over U⁺ (paired bootstrap over the clients of one seed; paired t over seeds); "
    "every personalized model is also compared with the global and the local baseline on "
    "per-client accuracy. Each of the three families is Holm-corrected over its pairs "
    f"(α = {ALPHA}). A pair's interval is the one its test inverts, at the level Holm's step "
    "tested it at (95 % for a lone pair; 1 − α/m for the first of m): it excludes 0 exactly when "
    "the corrected p is below α, so interval and verdict agree. Gaps without spread (one unit, "
    "or every unit showing the same gap) have no interval and no test. The vote above names a "
    "leader; over two or more seeds it is the answer only where the corrected test puts it ahead "
    "of every other contender, otherwise the answer is the models tied at the top. With one "
    "seed, no model is named: a test over one seed's clients treats the clients as the only "
    f"noise, and training noise (another seed's split and mini-batches) was not measured; "
    f"{MIN_SEEDS} or more seeds (experiment.seeds) measure it. For a pair left unresolved, 'to "
    "resolve' is the size of a paired t-test at power 0.8 and Holm's strictest α / m: the "
    "smallest n' ≥ ((t_{1−α/2m, n'−1} + t_{0.8, n'−1}) · σ_d / |Δ|)², σ_d the spread of the "
    "per-unit differences observed (√n times the standard error of Δ), at least one more unit "
    "than compared, and over clients at least the fewest whose signed-rank p can fall below "
    "α / m (2 / 2^n < α / m)."
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
    #: The level Holm's step-down tested the pair at; `low`, `high` are at 1 − alpha.
    alpha: float = ALPHA
    low: float | None = None
    high: float | None = None

    @property
    def resolved(self) -> bool:
        """Whether the corrected test separates the two (its interval then excludes 0)."""
        return self.gap.reason is None and self.p_holm < ALPHA

    @property
    def unreachable(self) -> bool:
        """Whether no data of this many units (and ties) could reach p below `alpha`."""
        return self.gap.reason is None and not self.resolved and self.gap.p_min >= self.alpha

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
                "ci_low": self.low, "ci_high": self.high, "ci_level": 1 - self.alpha,
                "p": g.p, "p_holm": self.p_holm, "n": g.n, "over": g.over, "test": g.test,
                "resolved": self.resolved, "ahead": self.ahead, "units_needed": self.needed,
                "training_noise": "not measured" if g.over == CLIENTS else "measured",
                "reason": g.reason}


@dataclass(frozen=True)
class Verdict:
    """The answer to one question once noise is accounted for.

    Attributes:
        leader: The thesis vote's model (None: undecided, see `reason`).
        top: The models tied at the top, the leader first; just the leader when resolved;
            empty with nothing to compare.
        pairs: Every pair of contenders compared, Holm-corrected together.
        status: ``"resolved"``, ``"tied"``, ``"training noise not measured"`` (one seed),
            ``"nothing to compare"`` (one contender) or ``"undecided"`` (no leader).
        over, n: The units the pairs are tested over.

    """

    question: str
    metric: str
    leader: str | None
    top: tuple[str, ...]
    pairs: tuple[Pair, ...]
    reason: str | None = None
    status: str = "tied"
    over: str = SEEDS
    n: int = 0

    @property
    def winner(self) -> str | None:
        """The model named, only where the corrected test over seeds resolves it."""
        return self.top[0] if self.status == "resolved" else None

    @property
    def ahead_over_clients(self) -> str | None:
        """With one seed: the leader, where the clients' test puts it ahead of every other."""
        if self.status != "training noise not measured" or self.leader is None:
            return None
        rivals = [m for m in self.top if m != self.leader]
        beaten = [p for m in rivals if (p := self.against(m)) and p.ahead == self.leader]
        return self.leader if rivals and len(beaten) == len(rivals) else None

    def against(self, model: str) -> Pair | None:
        """The leader's pair with `model`."""
        return next((p for p in self.pairs if {p.a, p.b} == {self.leader, model}), None)

    def to_json(self) -> dict:
        """Return the verdict as a JSON-ready mapping."""
        return {"metric": self.metric, "leader": self.leader, "winner": self.winner,
                "top": list(self.top), "resolved": self.status == "resolved",
                "status": self.status, "ahead_over_clients": self.ahead_over_clients,
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
    #: Every personalized model against the global and the local baseline (accuracy).
    baselines: tuple[Pair, ...] = ()

    @property
    def pairs(self) -> list[Pair]:
        """Every pair of the three families."""
        return [*self.best.pairs, *self.fairest.pairs, *self.baselines]

    def to_json(self) -> dict:
        """Return report.json's "uncertainty" entry of the split."""
        return {"over": self.over, "n": self.n, "level": LEVEL, "alpha": ALPHA,
                "resamples": RESAMPLES if self.over == CLIENTS else None,
                "intervals": {m: {p: i.to_json() for p, i in paths.items()}
                              for m, paths in self.intervals.items()},
                "verdicts": {"best": self.best.to_json(), "fairest": self.fairest.to_json()},
                "baselines": [p.to_json() for p in self.baselines]}


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
    bases = [b for b in dict.fromkeys((global_, local)) if b in summary.models]
    return Assessment(summary.split, summary.unit, over, n, intervals,
                      verdict(summary.best, candidates, QUESTIONS["best"], summary, gap, over, n),
                      verdict(summary.fairest, fair, QUESTIONS["fairest"], summary, gap, over,
                              n),
                      compare_pairs([(m, b) for m in candidates for b in bases],
                                    QUESTIONS["best"], gap))


def verdict(decision: Decision, contenders: list[str], metric: str, summary: SplitSummary,
            gap: Callable[[str, str, str], Gap | None], over: str = SEEDS, n: int = 0
            ) -> Verdict:
    """Compare every pair of `contenders` on `metric` (Holm), then gate the vote's leader.

    See the module docstring for the statuses; `over` and `n` are the tests' units.
    """
    if decision.model is None:
        return Verdict(decision.question, metric, None, (), (), decision.reason, "undecided",
                       over, n)
    leader = decision.model
    contenders = list(dict.fromkeys([*contenders, leader]))
    if len(contenders) < 2:
        what = ("personalized model" if decision.question == "best" else
                "personalized model that improved any client (a JI over U⁺)")
        return Verdict(decision.question, metric, leader, (), (),
                       f"{leader} is the only {what}, so no model is compared with it",
                       "nothing to compare", over, n)
    higher = METRIC_REGISTRY[metric.rsplit(".", 1)[1]].higher_is_better
    means = {m: summary.models[m].mean[metric] for m in contenders}
    ranked = sorted(contenders, key=lambda m: (  # best mean first; on a tie, the leader
        math.inf if means[m] is None else -means[m] if higher else means[m], m != leader, m))
    pairs = compare(ranked, metric, gap)
    if over == CLIENTS:  # one seed: the clients' test cannot see training noise
        top = (leader, *(m for m in ranked if m != leader))
        return Verdict(decision.question, metric, leader, top, pairs, None,
                       "training noise not measured", over, n)
    top = top_with(leader, ranked, pairs)
    return Verdict(decision.question, metric, leader, top, pairs, None,
                   "resolved" if len(top) == 1 else "tied", over, n)


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
    """Every pair of `ranked` (a before b), its `gap`, Holm-corrected together (`compare_pairs`)."""
    return compare_pairs([(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]],
                         metric, gap)


def compare_pairs(pairs: Sequence[tuple[str, str]], metric: str,
                  gap: Callable[[str, str, str], Gap | None]) -> tuple[Pair, ...]:
    """The `gap` of each pair (a − b), Holm-corrected together, each with its interval.

    Holm tests the i-th smallest of m p-values at α / (m − i + 1) and stops at the first it
    cannot reject. A pair's interval is its test's at the level of its step, and for every
    pair from the stopping one on at the stopping step's level: so a pair's interval excludes 0
    exactly when it is resolved. A pair left unresolved gets `units_needed` at Holm's strictest
    α / m (over clients, at least the fewest units whose signed-rank p can fall below it).

    >>> from pflpipe.metrics.uncertainty import over_seeds
    >>> values = {"a": [3.0, 3.5, 3.2], "b": [1.0, 1.2, 1.1], "c": [3.0, 3.4, 3.3]}
    >>> ab, ac = compare_pairs([("a", "b"), ("a", "c")], "accuracy.AA",
    ...                        lambda a, b, _: over_seeds(values[a], values[b]))
    >>> ab.resolved, ab.alpha, ab.low > 0, ac.resolved, ac.alpha, ac.low < 0 < ac.high
    (True, 0.025, True, False, 0.05, True)
    """
    tested = [(a, b, g) for a, b in pairs if (g := gap(a, b, metric)) is not None]
    adjusted = holm([g.p for _, _, g in tested])
    m = len(tested)
    order = sorted(range(m), key=lambda i: tested[i][2].p)  # holm's order
    stop = next((rank for rank, i in enumerate(order) if adjusted[i] >= ALPHA), m)
    step = {i: ALPHA / (m - min(rank, stop)) for rank, i in enumerate(order)}
    out = []
    for i, ((a, b, g), p) in enumerate(zip(tested, adjusted, strict=True)):
        needed = None
        if not (p < ALPHA and g.reason is None):
            needed = units_needed(g.delta, g.se, g.n, ALPHA / m)
            if needed is not None and g.test == SIGNED_RANK:
                needed = max(needed, signed_rank_units(ALPHA / m))
        out.append(Pair(a, b, metric, g, p, needed, step[i], *g.interval(step[i])))
    return tuple(out)


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
    if len(set(np.round(defined, 12))) == 1:
        return Interval(None, None, "seeds", len(defined), NO_SPREAD.format(units="seeds"))
    return Interval(*t_interval(defined), "seeds", len(defined))


def _client_interval(replicates: np.ndarray, n_clients: int) -> Interval:
    defined = int(np.isfinite(replicates).sum())
    if defined < len(replicates) / 2:
        return Interval(None, None, CLIENTS, n_clients,
                        f"defined on {defined} of {len(replicates):,} client resamples")
    low, high = percentile_interval(replicates)
    if round(low, 12) == round(high, 12):
        return Interval(None, None, CLIENTS, n_clients, NO_SPREAD.format(units="clients"))
    return Interval(low, high, CLIENTS, n_clients)

