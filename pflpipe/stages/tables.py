"""Reading the CSV tables the stages write, without the training stages' imports.

`evaluate_fairness` and `collect_results` read results and histories but train nothing, so they
must not pay for `pflpipe.stages.common` (torch, the engine) at start-up.
"""

import csv
from pathlib import Path


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV written by a stage."""
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))
