"""The words and abbreviations of the report and the CLI, defined in one place.

The metrics' own names come from the registry (`METRIC_REGISTRY`: name, title, direction); the
other terms the report uses (QoI, U⁺, GA, CI, ...) are in `TERMS`. The report's legends and its
closing "Words and abbreviations" section are made from both, and docs/reading-the-report.md
defines each of them with its formula and source (tests/test_docs.py checks it does).
"""

from collections.abc import Iterable

from pflpipe.metrics.metric_registry import METRIC_REGISTRY

#: Terms of the report that are not registered metrics: the abbreviation, then plain words.
TERMS: dict[str, str] = {
    "P": "a client's personalized accuracy (the personalized model on its own test split)",
    "G": "a client's accuracy under the global baseline (FedAvg's global model)",
    "L": "a client's accuracy under the local baseline (trained on its own data alone)",
    "QoI": "quantum of improvement, P − max(G, L) per client (thesis eq. 5.2)",
    "U⁺": "the clients that improved (QoI > 0)",
    "U⁻": "the clients that lost accuracy (QoI < 0)",
    "PA": "personalized accuracy, the personalized model's score",
    "GA": "generalized accuracy, the algorithm's own global model's score",
    "Δ": "the gap between two models, first minus second",
    "CI": "confidence interval (95 %)",
    "pp": "percentage points",
    "p (Holm)": "the paired test's p-value, Holm-corrected over the pairs of its question",
    "MB": "megabytes (10⁶ bytes) sent or received, in the Compute table",
    "MSE": "mean squared error (regression tasks; −MSE is scored so that higher is better)",
    "DS-1": "data split 1: equal client sizes, a few classes per client (thesis §5.2.1)",
    "DS-2": "data split 2: every class shared out by a Dirichlet draw (thesis §5.2.1)",
    "DS-3": "data split 3: two classes per client, log-normal client sizes (thesis §5.2.1)",
    "DS-4": "data split 4: Per-FedAvg's split, two groups of clients (thesis §5.2.1)",
}


#: The report's closing section and its in-page anchor (as GitHub and the HTML report spell it).
TITLE, ANCHOR = "Words and abbreviations", "words-and-abbreviations"


def definition(name: str) -> str:
    """Plain words for a metric or a term, e.g. ``"JI"`` → ``"Jain's index (higher is better)"``."""
    if name in METRIC_REGISTRY:
        metric = METRIC_REGISTRY[name]
        way = "higher" if metric.higher_is_better else "lower"
        return f"{metric.title} ({way} is better)"
    return TERMS[name]


def names() -> list[str]:
    """Every abbreviation the report may use: the registered metrics, then the other terms."""
    return [*METRIC_REGISTRY, *TERMS]


def legend(used: Iterable[str]) -> str:
    """One line naming what the abbreviations of a table stand for.

    >>> for part in legend(["PUI", "JI"]).split("; "):
    ...     print(part)
    *Legend:* PUI = % of clients improved (higher is better)
    JI = Jain's index (higher is better)
    every term: [Words and abbreviations](#words-and-abbreviations).
    """
    return ("*Legend:* " + "; ".join(f"{n} = {definition(n)}" for n in dict.fromkeys(used))
            + f"; every term: [{TITLE}](#{ANCHOR}).")


def section() -> list[tuple]:
    """The report's closing section: every abbreviation it may use, in plain words."""
    return [("h2", TITLE),
            ("p", "Each is defined with its formula and source in pflpipe's documentation, "
                  "on the page Reading the report. ↑: higher is better; ↓: lower is better. Bold "
                  "marks the best value of each row, every tied value alike."),
            ("list", [f"**{n}** — {definition(n)}" for n in names()])]
