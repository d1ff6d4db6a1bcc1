"""Which of a client's rounds a run keeps, and when its rounds stop early.

The engine keeps each client's last and best-val scores and models. A client's best-val round is
chosen among the rounds it was scored in after round 0: the highest validation accuracy, ties
(NaN for a regression task) broken by the lower validation loss; without a validation split the
best round is the last. Round 0 is the model the run started from (the warm start, or the
initial model), which the algorithm did not train: it is the best round only of a run that
trains no round, so no model is credited with a round it did not train (the report counts the
clients that validated better there: `pflpipe.report.report_notes`). Early stopping watches the
sample-weighted mean validation loss over every client, on full sweeps only.
"""

import torch
from torch import Tensor

from pflpipe.engine.tree import Tree, assign, assign_if, tree_map


def track(snap: dict, scores: dict[str, Tensor], models: Tree, clients: Tensor,
          best_on_val: bool) -> None:
    """Update the last and best-val scores (and best models) of the evaluated `clients`."""
    if "best" not in snap:   # round 0 scores every client
        snap["last"] = scores
        snap["best"] = {k: v.clone() for k, v in scores.items()}
        snap["best_model"] = tree_map(torch.Tensor.clone, models)
        snap["last_model"] = tree_map(torch.Tensor.clone, models)
        return
    assign(snap["last_model"], clients, models)
    best = {k: v[clients] for k, v in snap["best"].items()}
    acc, best_acc = scores["val_accuracy"], best["val_accuracy"]
    tie = (acc == best_acc) | (acc.isnan() & best_acc.isnan())
    improved = (acc > best_acc) | (tie & (scores["val_loss"] < best["val_loss"]))
    if not best_on_val:
        improved = torch.ones_like(improved)
    improved |= best["round"] == 0   # a trained round replaces the start, whatever it scores
    for k in scores:
        snap["last"][k].index_copy_(0, clients, scores[k])
        snap["best"][k].index_copy_(0, clients, torch.where(improved, scores[k], best[k]))
    assign_if(snap["best_model"], clients, improved, models)


def early_stop(snap: dict, scores: dict[str, Tensor], rule: tuple[int, float] | None,
               val_counts: Tensor) -> None:
    """Count a round without improvement of the mean val loss; stop after `rule`'s patience.

    `rule` is (patience, min_delta), or None for no early stopping; `val_counts` [C] weigh the
    clients' losses.
    """
    if rule is None or snap["round"] == 0:
        return
    patience, min_delta = rule
    counts = val_counts.to(scores["val_loss"].device).float()
    mean = float((scores["val_loss"] * counts).sum() / counts.sum())
    early = snap["early"]
    if mean < early["best"] - min_delta:
        early["best"], early["bad"] = mean, 0
    else:
        early["bad"] += 1
    snap["stopped"] = early["bad"] >= patience
