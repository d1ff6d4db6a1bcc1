"""The report's generalized-vs-personalized section (Flow's Tables 5 and 7).

Its numbers are `pflpipe.metrics.generalization`'s comparisons.
"""

from pflpipe.metrics.generalization import COLUMNS, Comparison
from pflpipe.report.rendering import fmt


def blocks(comparisons: dict[str, Comparison], split: str, unit: str) -> list[tuple]:
    """The report's blocks (`pflpipe.report.rendering`) of one split's comparison."""
    def cell(c: Comparison, name: str) -> str:
        metric = "PUI" if name == "beats_global" else "AA"   # % of clients vs accuracy unit
        text = fmt(c.mean[name], metric, unit)
        return text if c.std[name] is None or c.mean[name] is None else \
            f"{text} ± {fmt(c.std[name], metric, unit)}"

    rows = [[model, *(cell(c, name) for name in COLUMNS)] for model, c in comparisons.items()]
    return [("h3", "Generalized vs personalized accuracy (Flow Tables 5 and 7)"),
            ("p", f"GA: the algorithm's global model on each client's {split} split; PA: the "
                  "client's personalized model; both the unweighted mean over clients. "
                  "PA > GA: % of clients whose PA is strictly above their GA."),
            ("table", ["Model", "GA", "PA", "PA > GA (% clients)"], rows)]
