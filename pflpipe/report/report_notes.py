"""Notes a report carries beside the scores: where a number means less than it seems.

Per model (the report's Notes, report.json ``notes``; `model_lines`), from history.csv rows
(`pflpipe.training.score_rows.history_rows`: model, seed, client, round, split, loss, accuracy,
scope, diag.*):

- **Started better.** Best-on-validation selection never picks round 0, the model a run started
  from (`pflpipe.engine.selection`): the warm start, which the algorithm did not train. A
  client whose round-0 validation score beats every round the algorithm trained is counted:
  the algorithm made it worse than where it started ("pfedbayes: 35 of 40 clients validated
  better at round 0, before it trained").
- **Degenerate routing.** A routing algorithm (Flow's ``diag.to_global.k``, the share of
  instances hard-routed to the global copy of layer k) routes per layer rather than per instance
  when a layer's share at its last round lies outside ``ROUTED`` on a seed.

Per split, under its accuracy summaries (`accuracy_notes`), from the results table:
top_samples_decile when every client holds the same number of samples.
"""

import math
from collections.abc import Iterable

from pflpipe.metrics.results_table import ResultsTable

#: The open interval of shares hard-routed to global that counts as routing per instance.
ROUTED = (0.05, 0.95)
_ROUTE_PREFIX = "diag.to_global."


def started_better(history: Iterable[dict]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (model, seed): (clients whose round 0 beats every trained round on validation, clients).

    "Beats" is selection's order: higher validation accuracy, ties (and NaN, a regression) to
    the lower loss. Only models with validation rows at round 0 and a trained round count.

    >>> rows = [{"model": "m", "seed": 0, "client": c, "round": r, "split": "val", "scope": "",
    ...          "accuracy": a, "loss": 1.0} for c, r, a in
    ...         [(0, 0, 0.9), (0, 1, 0.5), (0, 2, 0.8), (1, 0, 0.5), (1, 1, 0.5)]]
    >>> rows[4]["loss"] = 0.5
    >>> started_better(rows)
    {('m', 0): (1, 2)}
    """
    start: dict[tuple, tuple] = {}
    trained: dict[tuple, tuple] = {}
    for row in history:
        if row["split"] != "val" or row.get("scope", "") != "":
            continue
        key = (row["model"], int(row.get("seed", 0)), int(row["client"]))
        score = _order(row)
        if int(row["round"]) == 0:
            start[key] = score
        elif key not in trained or score > trained[key]:
            trained[key] = score
    out: dict[tuple[str, int], list[int]] = {}
    for key, best in trained.items():
        if key in start:
            counts = out.setdefault(key[:2], [0, 0])
            counts[0] += start[key] > best
            counts[1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def _order(row: dict) -> tuple[float, float]:
    """Selection's order of a validation row: accuracy first, then the lower loss."""
    accuracy = row.get("accuracy")
    accuracy = -math.inf if accuracy in (None, "") or math.isnan(float(accuracy)) else float(
        accuracy)
    return accuracy, -float(row["loss"])


def routing_shares(history: Iterable[dict]) -> dict[str, dict[int, tuple[int, list[float]]]]:
    """Per model and seed: (last round with routing, mean share to global per layer there).

    The mean is over the round's clients (``diag.to_global.k``, by each client's router after
    its round).

    >>> routing_shares([{"model": "flow", "seed": 0, "round": 3, "split": "train",
    ...                  "diag.to_global.0": 1.0, "diag.to_global.1": 0.5},
    ...                 {"model": "flow", "seed": 0, "round": 3, "split": "train",
    ...                  "diag.to_global.0": 1.0, "diag.to_global.1": 0.0}])
    {'flow': {0: (3, [1.0, 0.25])}}
    """
    rounds: dict[tuple[str, int], dict[int, list[list[float]]]] = {}
    for row in history:
        layers = sorted((k for k in row if k.startswith(_ROUTE_PREFIX)
                         and row[k] not in (None, "")), key=lambda k: int(k.rsplit(".", 1)[1]))
        if layers:
            per_round = rounds.setdefault((row["model"], int(row.get("seed", 0))), {})
            per_round.setdefault(int(row["round"]), []).append([float(row[k]) for k in layers])
    out: dict[str, dict[int, tuple[int, list[float]]]] = {}
    for (model, seed), per_round in sorted(rounds.items()):
        last = max(per_round)
        shares = [sum(v) / len(v) for v in zip(*per_round[last], strict=True)]
        out.setdefault(model, {})[seed] = (last, shares)
    return out


def model_lines(history: Iterable[dict], selection: str = "best_val") -> list[str]:
    """The report's notes, one line per model that needs one.

    >>> model_lines([{"model": "pfedbayes", "seed": 0, "client": c, "round": r, "split": "val",
    ...         "scope": "", "accuracy": a, "loss": 1.0} for c, r, a in
    ...        [(0, 0, 0.9), (0, 1, 0.1), (1, 0, 0.9), (1, 1, 0.95)]])[0][:60]
    'pfedbayes: 1 of 2 clients validated better at round 0 (the m'
    """
    history = list(history)
    out = []
    if selection == "best_val":
        counted: dict[str, list[int]] = {}
        for (model, _), (better, total) in started_better(history).items():
            sums = counted.setdefault(model, [0, 0])
            sums[0], sums[1] = sums[0] + better, sums[1] + total
        out += [f"{model}: {better} of {total} clients validated better at round 0 (the model "
                "it started from, before it trained) than at any round it trained: it made them "
                "worse than where it started. They are scored at a round it trained, never at "
                "round 0." + (" (Clients summed over the seeds.)" if _seeds(history, model) > 1
                              else "")
                for model, (better, total) in sorted(counted.items()) if better]
    for model, seeds in routing_shares(history).items():
        low, high = ROUTED
        flagged = {seed: (last, shares) for seed, (last, shares) in seeds.items()
                   if any(not low < s < high for s in shares)}
        if flagged:
            per_seed = "; ".join(
                f"seed {seed}, round {last}: " + ", ".join(f"layer {k} {100 * s:.1f} %"
                                                           for k, s in enumerate(shares))
                for seed, (last, shares) in flagged.items())
            out.append(f"{model}: routing is degenerate on {len(flagged)} of {len(seeds)} "
                       f"seed(s): a layer's share of instances hard-routed to global lies "
                       f"outside {100 * low:.0f}–{100 * high:.0f} % ({per_seed}; mean over the "
                       "round's clients), so that layer is routed per layer, not per instance.")
    return out


def _seeds(history: list[dict], model: str) -> int:
    return len({row.get("seed", 0) for row in history if row["model"] == model})


def equal_sizes(table: ResultsTable, split: str) -> bool:
    """Whether every seed's clients hold the same number of `split` samples.

    >>> from pflpipe.metrics import table_from_records
    >>> equal_sizes(table_from_records([{"client": c, "model": "a", "accuracy": 0.5,
    ...                                  "n_samples": 30} for c in range(3)]), "test")
    True
    """
    sizes: dict[int, set[int]] = {}
    for row in table.rows:
        if row.split == split and not row.scope and row.n_samples is not None:
            sizes.setdefault(row.seed, set()).add(row.n_samples)
    return bool(sizes) and all(len(s) == 1 for s in sizes.values())


def accuracy_notes(table: ResultsTable, split: str, metrics) -> list[str]:
    """What the accuracy summaries' table needs said: top_samples_decile with equal clients."""
    if "top_samples_decile" not in metrics or not equal_sizes(table, split):
        return []
    return ["top_samples_decile: every client holds the same number of samples on this split, "
            "so no decile of clients is largest; ties rank the less accurate client first, and "
            "the value is the bottom-decile mean (the min with 10 clients or fewer), not "
            "Self-FL's largest clients."]
