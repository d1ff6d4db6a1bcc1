"""The report's tuning section: every grid, its scores, the chosen values and the tuning seeds.

Its input is what `pflpipe.stages.evaluate_fairness.context` gathers: the `tune` stage's record
of each tuned entry (kept in the entry's results directory) and the entries left untuned.
"""

import json


def blocks(tuning: dict) -> list[tuple]:
    """Return the render blocks of the tuning section (none without tuning)."""
    if not tuning:
        return []
    score = "MSE (lower is better)" if tuning["score"] == "mse" else "accuracy"
    seeds = ", ".join(map(str, tuning["seeds"]))
    out: list[tuple] = [
        ("h2", "Tuning"),
        ("p", f"Settings chosen on tuning seed(s) {seeds}, which are never reported (the "
              f"reported seeds are {', '.join(map(str, tuning['reported_seeds']))}): every grid "
              f"point of an entry trained on every tuning seed, scored by the mean client "
              f"validation {score} of each client's {tuning['selection']} model; the point with "
              "the best mean over the tuning seeds was chosen (a tie: the point written first). "
              "Test splits were never read. The reported seeds ran only the chosen settings."),
    ]
    for label, record in tuning["entries"].items():
        budget = record["budget"]
        rounds = f", {budget['rounds']} rounds per point" if budget.get("rounds") else ""
        keys = list(record["grid"])
        header = [*keys, *(f"seed {s}" for s in tuning["seeds"]), "mean", "chosen"]
        rows = [[*(_value(p["values"][k]) for k in keys),
                 *(_score(p["scores"][str(s)]) for s in tuning["seeds"]), _score(p["mean"]),
                 "✓" if p["values"] == record["chosen"] else ""] for p in record["points"]]
        chosen = ", ".join(f"{k} = {_value(v)}" for k, v in record["chosen"].items())
        failed = [p for p in record["points"] if p.get("diverged")]
        out += [("h3", f"{label}: {chosen}"),
                ("p", f"{len(record['points'])} grid point(s), budget {budget['max_points']}"
                      f"{rounds}." + (f" {len(failed)} diverged, scored as failed and never "
                                      "chosen: " + "; ".join(
                                          f"{json.dumps(p['values'])} ({p['diverged']})"
                                          for p in failed) + "." if failed else "")),
                ("table", header, rows)]
    if tuning["untuned"]:
        out.append(("p", f"Not tuned (run with the spec's settings): "
                         f"{', '.join(tuning['untuned'])}."))
    if tuning.get("warning"):
        out.append(("p", tuning["warning"]))
    return out


def _score(score: float | None) -> str:
    return "diverged" if score is None else f"{score:.4f}"


def _value(value) -> str:
    return json.dumps(value) if isinstance(value, str | bool) else f"{value:g}" \
        if isinstance(value, float) else str(value)
