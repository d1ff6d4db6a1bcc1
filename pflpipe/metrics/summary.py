"""Per-model metrics of each split, their mean ± std over seeds, and the thesis's two answers.

Every model gets the accuracy summaries (AA, std, min, bottom-decile mean) and the fairness
metrics of its per-client accuracies. Every model other than the two baselines is
*personalized*: it also gets QoI = P − max(G, L) per client, the performance metrics on the QoI
and the fairness metrics on QoI over U⁺ and on |QoI| over U⁻ (never on the mixed set).

Metrics are computed per seed, then averaged; ``std`` holds the sample std over seeds (None with
one seed). A metric that has no value is None, and ``reasons`` says why at its dotted path (e.g.
``"performance.MPD": "U⁻ is empty: ..."``).

The answers, per split (`BEST_RULE`, `FAIREST_RULE`), are decided by `decide` from the means over
seeds, among the personalized models only, by a vote over registry metrics: each metric is won by
every model within 1e-9 (relative) of the best value in the metric's registered direction.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pflpipe.metrics.fairness import FAIRNESS
from pflpipe.metrics.metric_registry import METRIC_REGISTRY, fsum
from pflpipe.metrics.performance import ACCURACY, PERFORMANCE, quantum_of_improvement
from pflpipe.metrics.results_table import (
    ResultsTable,
    Scores,
    client_key,
    measure,
    scores_by_seed,
    select_rows,
)

#: A verdict resting on fewer clients than this is flagged in the answer (fairness over one or
#: two values is trivially high: AV 0, JI 1).
MIN_CLIENTS = 3
#: Groups of fairness values: QoI over U⁺, |QoI| over U⁻, per-client accuracies.
GROUPS = ("improved", "decreased", "accuracy")
PATHS = (
    *(f"performance.{m}" for m in PERFORMANCE),
    *(f"fairness.{g}.{m}" for g in GROUPS for m in FAIRNESS),
    *(f"accuracy.{m}" for m in ACCURACY),
)
BEST_CRITERIA = tuple(f"performance.{m}" for m in PERFORMANCE)
FAIREST_CRITERIA = tuple(f"fairness.improved.{m}" for m in FAIRNESS)
BEST_RULE = (
    "Best performing = the personalized model that wins the most of the 7 performance metrics "
    "PUI↑, PUD↓, MPI↑, API↑, MPD↑, APD↑ (MPD and APD are negative: closer to 0 is better) and "
    "AA↑, each the mean over seeds. A metric is won by every model tied at its best value; an "
    "undefined MPI/API ranks as 0 (no client improved), an undefined MPD/APD as 0 (no client "
    "lost). Equal numbers of wins are broken by AA, then by name."
)
FAIREST_RULE = (
    "Fairest = the personalized model that wins the most of the 4 fairness metrics AV↓, CS↑, "
    "Entropy↑ and JI↑ applied to QoI over U⁺: how evenly the improvement is shared among the "
    "clients that improved (thesis §5.2.3 and §6.9, Fig. 6.9). A model with an empty U⁺ cannot "
    "win. Equal numbers of wins are broken by AA, then by name. The same metrics on |QoI| over "
    "U⁻ and on the accuracies are reported, not voted; read the fairness next to PUI, since "
    "being fair without performing well is not fair (thesis §6.9)."
)


@dataclass(frozen=True)
class ModelResult:
    """One model's metrics on one split; flat mappings keyed by dotted path (see `PATHS`)."""

    model: str
    role: str
    mean: dict[str, float | None]
    std: dict[str, float | None]
    reasons: dict[str, str]
    seeds: tuple[int, ...]
    per_client_accuracy: dict[str, float]
    per_client_qoi: dict[str, float] | None = None
    qoi: np.ndarray | None = field(default=None, repr=False)
    per_client_seeds: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False)

    @property
    def is_personalized(self) -> bool:
        """Whether QoI is defined for this model (it is not a baseline)."""
        return self.role == "personalized"

    def to_json(self) -> dict:
        """Return the report.json entry: nested metric means, std over seeds, reasons."""
        mean = _nest(self.mean)
        return {
            "role": self.role, "performance": mean["performance"], "fairness": mean["fairness"],
            "accuracy": mean["accuracy"], "std_over_seeds": _nest(self.std),
            "reasons": dict(self.reasons), "n_clients": len(self.per_client_accuracy),
            "seeds": list(self.seeds),
            "per_client": {c: {"accuracy": a, "qoi": (self.per_client_qoi or {}).get(c)}
                           for c, a in self.per_client_accuracy.items()},
        }


@dataclass(frozen=True)
class Decision:
    """The answer to one question: which model, the wins behind it, and how ties were broken."""

    question: str
    model: str | None
    winners: dict[str, list[str]]
    votes: dict[str, int]
    tie_break: str | None = None
    reason: str | None = None

    def to_json(self) -> dict:
        """Return the decision as JSON-ready mapping."""
        return {"model": self.model, "votes": self.votes, "winners": self.winners,
                "tie_break": self.tie_break, "reason": self.reason}

    def explain(self) -> str:
        """Say in words why this model was chosen."""
        if self.model is None:
            return f"undecided ({self.reason})"
        alone = [p.rsplit(".", 1)[1] for p, ms in self.winners.items() if ms == [self.model]]
        shared = [p.rsplit(".", 1)[1] for p, ms in self.winners.items()
                  if self.model in ms and len(ms) > 1]
        text = f"{self.model} (wins {len(alone) + len(shared)} of {len(self.winners)} criteria: "
        text += ", ".join(alone) or "none alone"
        text += f"; tied at the best on {', '.join(shared)})" if shared else ")"
        return f"{text}; {self.tie_break}" if self.tie_break else text


@dataclass(frozen=True)
class SplitSummary:
    """Every model's metrics on one split and the two answers."""

    split: str
    unit: str
    seeds: tuple[int, ...]
    clients: tuple[str, ...]
    models: dict[str, ModelResult]
    best: Decision
    fairest: Decision

    def answer(self) -> str:
        """Answer the thesis's two questions for this split in words."""
        return " ".join([f"Best performing on {self.split}: {self.best.explain()}.",
                         f"Fairest on {self.split}: {self.fairest.explain()}.",
                         *self.remarks(self.best.model, self.fairest.model)])

    def remarks(self, best: str | None, fairest: str | None, fairness_of: str | None = None
                ) -> list[str]:
        """The notes after the two answers, about the models named `best` and `fairest`.

        `fairness_of` (default `fairest`) is the model whose count of improved clients the
        caution on a fairness verdict reads.
        """
        lines = []
        if best and fairest and best != fairest:
            lines.append(f"The best-performing model ({best}) is not the fairest ({fairest}): "
                         f"performance and fairness disagree here (thesis Remark 1).")
        elif best and best == fairest:
            lines.append(f"{best} is both the best performing and the fairest.")
        fairness_of = fairness_of or fairest
        pui = self.models[fairness_of].mean["performance.PUI"] if fairness_of else None
        improved = None if pui is None else pui / 100 * len(self.clients)
        if improved is not None and improved < MIN_CLIENTS:
            count = (f"{round(improved)} improved client(s)" if len(self.seeds) < 2 else
                     f"{improved:.2g} improved clients, on average over {len(self.seeds)} seeds,")
            lines.append(f"Caution: the fairness verdict rests on {count} of "
                         f"{len(self.clients)} ({fairness_of}'s U⁺); "
                         f"fairness over fewer than {MIN_CLIENTS} clients is trivially high, so "
                         f"it says little. Read PUI and the "
                         f"{measure(self.unit, fairness=True)} fairness instead.")
        elif pui is not None and pui < 50:
            lines.append(f"Note: {fairness_of} improved only {pui:.1f}% of clients; its fairness "
                         f"describes how evenly those few improvements are shared.")
        if len(self.clients) < MIN_CLIENTS:
            lines.append(f"Caution: {len(self.clients)} client(s) only; no verdict is reliable.")
        return lines


def summarize(table: ResultsTable, *, local: str = "local", global_: str = "fedavg",
              selection: str = "best_val") -> dict[str, SplitSummary]:
    """Compute every model's metrics and the two answers for each split of the table.

    A table of the global baseline alone (a FedAvg-only run) needs no local baseline.

    Raises:
        DataError: a baseline is absent, or a model misses a client, seed or selection.

    """
    rows = select_rows(table, selection)
    personalized = {row.model for row in rows} - {local, global_}
    required = (local, global_) if personalized else (global_,)
    return {split: _summarize_split(table.unit, scores_by_seed(rows, split, required),
                                    local, global_)
            for split in table.splits if any(row.split == split for row in rows)}


def _summarize_split(unit: str, per_seed: list[Scores], local: str, global_: str
                     ) -> SplitSummary:
    seeds = tuple(s.seed for s in per_seed)
    models = sorted({m for s in per_seed for m in s.accuracy},
                    key=lambda m: (m != local, m != global_, m))
    results = {m: _model_result(m, per_seed, local, global_, unit) for m in models}
    candidates = [m for m in models if results[m].is_personalized]
    clients = tuple(sorted({c for s in per_seed for c in s.clients}, key=client_key))
    split = per_seed[0].split
    return SplitSummary(split, unit, seeds, clients, results,
                        decide("best", results, candidates, BEST_CRITERIA),
                        decide("fairest", results, candidates, FAIREST_CRITERIA))


def _role(model: str, local: str, global_: str) -> str:
    roles = [name for name, base in (("local", local), ("global", global_)) if model == base]
    return " and ".join(roles) + " baseline" if roles else "personalized"


def _model_result(model: str, per_seed: list[Scores], local: str, global_: str,
                  unit: str = "fraction") -> ModelResult:
    role = _role(model, local, global_)
    scored, qois = [], []
    for s in per_seed:
        acc = s.accuracy[model]
        qoi = None if role != "personalized" else quantum_of_improvement(
            acc, s.accuracy[global_], s.accuracy[local])
        scored.append(score(acc, qoi, role, s.n_samples, errors=unit == "neg_mse"))
        qois.append(qoi)
    mean, std, reasons = _aggregate(scored, [s.seed for s in per_seed])
    per_client_qoi = None if role != "personalized" else _per_client(per_seed, qois)
    accuracies = [s.accuracy[model] for s in per_seed]
    return ModelResult(
        model, role, mean, std, reasons, tuple(s.seed for s in per_seed),
        _per_client(per_seed, accuracies), per_client_qoi,
        None if role != "personalized" else np.concatenate(qois),
        _per_client(per_seed, accuracies, reduce=tuple),
    )


def score(accuracy: np.ndarray, qoi: np.ndarray | None, role: str = "personalized",
          n_samples: np.ndarray | None = None, *, errors: bool = False
          ) -> tuple[dict[str, float | None], dict[str, str]]:
    """Compute every metric of `PATHS` for one model on one seed.

    Args:
        accuracy: Per-client accuracies of the model (−MSE for a regression).
        qoi: Per-client QoI, or None for a baseline (its QoI metrics are then None).
        role: Named in the reason for a baseline's missing QoI metrics.
        n_samples: Per-client sample counts, for the metrics that weigh clients by them.
        errors: The scores are negated errors (−MSE): the fairness of the per-client scores is
            that of the errors themselves, which are non-negative.

    Returns:
        ``(values, reasons)``: values by dotted path; a reason for every None value.

    """
    inputs = {"accuracy": accuracy, "fairness.accuracy": -accuracy if errors else accuracy}
    if qoi is not None:
        inputs |= {"performance": qoi, "fairness.improved": qoi[qoi > 0],
                   "fairness.decreased": np.abs(qoi[qoi < 0])}
    values: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    for path in PATHS:
        group, name = path.rsplit(".", 1)
        data = accuracy if path == "performance.AA" else inputs.get(group)
        if METRIC_REGISTRY[name].reads == "accuracy_and_samples":
            if n_samples is None:
                values[path] = None
                reasons[path] = "the results table gives no n_samples for every client"
                continue
            data = np.column_stack((accuracy, n_samples))
        if data is None:
            values[path] = None
            reasons[path] = f"{role} model: QoI is measured against the baselines, not for them"
            continue
        if group.startswith("fairness.") and group != "fairness.accuracy" and data.size == 0:
            sign = "U⁺" if group == "fairness.improved" else "U⁻"
            values[path], reasons[path] = None, f"{sign} is empty: no client " + (
                "improved on max(G, L)" if sign == "U⁺" else "lost accuracy against max(G, L)")
            continue
        values[path], reason = METRIC_REGISTRY[name].compute(data)
        if reason:
            reasons[path] = reason
    return values, reasons


def _aggregate(scored: Sequence[tuple[dict, dict]], seeds: Sequence[int]
               ) -> tuple[dict[str, float | None], dict[str, float | None], dict[str, str]]:
    mean: dict[str, float | None] = {}
    std: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    for path in PATHS:
        defined = [values[path] for values, _ in scored if values[path] is not None]
        missing = {seed: why[path] for seed, (values, why) in zip(seeds, scored, strict=True)
                   if values[path] is None}
        mean[path] = fsum(np.array(defined)) / len(defined) if defined else None
        std[path] = (math.sqrt(fsum((np.array(defined) - mean[path]) ** 2) / (len(defined) - 1))
                     if len(defined) > 1 else None)
        if missing:
            why = "; ".join(dict.fromkeys(missing.values()))
            if defined:
                why = (f"undefined for seed(s) {', '.join(map(str, missing))} ({why}); mean over "
                       f"the other {len(defined)} seed(s)")
            reasons[path] = why
    return mean, std, reasons


def _per_client(per_seed: Sequence[Scores], arrays: Sequence[np.ndarray],
                reduce=lambda v: math.fsum(v) / len(v)) -> dict:
    """Each client's values over the seeds, reduced (the mean by default)."""
    values: dict[str, list[float]] = {}
    for scores, array in zip(per_seed, arrays, strict=True):
        for client, value in zip(scores.clients, array.tolist(), strict=True):
            values.setdefault(client, []).append(value)
    return {c: reduce(v) for c, v in sorted(values.items(), key=lambda kv: client_key(kv[0]))}


def decide(question: str, models: Mapping[str, ModelResult], candidates: Sequence[str],
           criteria: Sequence[str]) -> Decision:
    """Return the candidate winning the most criteria (see `BEST_RULE`, `FAIREST_RULE`).

    Each criterion is a dotted path whose last part names a registry metric; its direction
    (`higher_is_better`) and the rank of an undefined value (`null_as`) come from the registry.
    """
    if not candidates:
        return Decision(question, None, {}, {}, reason="the table holds no personalized model, "
                        "only the baselines")
    winners = {path: _winners(models, candidates, path) for path in criteria}
    votes = {m: sum(m in ms for ms in winners.values()) for m in candidates}
    if max(votes.values()) == 0:
        return Decision(question, None, winners, votes, reason="no personalized model has a "
                        "value for these metrics (U⁺ is empty for every model: none improved "
                        "any client)")
    top = [m for m in candidates if votes[m] == max(votes.values())]
    model, tie_break = _break_tie(top, models, votes[top[0]])
    return Decision(question, model, winners, votes, tie_break)


def _winners(models: Mapping[str, ModelResult], candidates: Sequence[str], path: str
             ) -> list[str]:
    metric = METRIC_REGISTRY[path.rsplit(".", 1)[1]]
    ranked = {m: models[m].mean[path] for m in candidates}
    ranked = {m: metric.null_as if v is None else v for m, v in ranked.items()}
    ranked = {m: v for m, v in ranked.items() if v is not None}
    if not ranked:
        return []
    best = max(ranked.values()) if metric.higher_is_better else min(ranked.values())
    return [m for m, v in ranked.items() if math.isclose(v, best, rel_tol=1e-9, abs_tol=1e-12)]


def _break_tie(top: list[str], models: Mapping[str, ModelResult], n_votes: int
               ) -> tuple[str, str | None]:
    if len(top) == 1:
        return top[0], None
    aa = {m: models[m].mean["accuracy.AA"] for m in top}
    best_aa = max(aa.values())
    by_aa = sorted(m for m in top if math.isclose(aa[m], best_aa, rel_tol=1e-9, abs_tol=1e-12))
    tied = f"{', '.join(top)} tie with {n_votes} win(s) each"
    listing = ", ".join(f"{m} {aa[m]:.4g}" for m in top)
    if len(by_aa) == 1:
        return by_aa[0], f"{tied}; broken by AA ({listing})"
    return by_aa[0], f"{tied} and equal AA ({listing}); broken by name"


def _nest(flat: Mapping[str, object]) -> dict:
    nested: dict = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = nested
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return nested
