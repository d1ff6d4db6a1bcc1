"""Results tables for the one-seed bootstrap's golden test (`test_metrics_bootstrap.py`).

`golden/bootstrap.json` holds `assessed(name)` of every table of `TABLES` as computed by the
scalar bootstrap of base commit 1f2e09b (one `score` call per client resample), recorded before
the bootstrap was vectorized; `golden/bootstrap-verdicts.json` the verdicts and pairs of today's
procedure (issue 46), which ``python tests/unit/bootstrap_tables.py`` writes again.
"""

import json
import sys
from pathlib import Path

import numpy as np

from pflpipe.metrics import summarize, table_from_records
from pflpipe.metrics.pairwise import assess
from pflpipe.report.results_reader import read_table

GOLDEN = Path(__file__).parent / "golden"
#: The quickstart's table (`pflpipe run specs/persfl-digits.yaml` at 1f2e09b, seed 0).
QUICKSTART = GOLDEN / "quickstart-results.csv"
MODELS = ("local", "fedavg", "persfl", "fedper", "ditto")


def synthetic(seed: int, clients: int, *, samples: bool = True, regression: bool = False,
              ties: bool = False) -> list[dict]:
    """One seed's rows: accuracies k/n of n test samples (ties and exact zeros arise)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 60, size=clients)
    rows = []
    for model in MODELS:
        skill = rng.uniform(0.4, 0.95)
        for client in range(clients):
            n = int(sizes[client])
            correct = int(rng.binomial(n, skill)) if not ties else int(n * skill)
            row = {"client": client, "model": model, "seed": 0, "split": "test",
                   "selection": "best_val"}
            row |= ({"loss": float(rng.gamma(2.0, 0.1))} if regression
                    else {"accuracy": correct / n})
            rows.append(row | ({"n_samples": n} if samples else {}))
    return rows


TABLES = {
    "quickstart": lambda: read_table([QUICKSTART], unit="fraction"),
    "k10": lambda: table_from_records(synthetic(1, 10)),
    "k3": lambda: table_from_records(synthetic(2, 3)),
    "k37-no-samples": lambda: table_from_records(synthetic(3, 37, samples=False)),
    "k20-ties": lambda: table_from_records(synthetic(4, 20, ties=True)),
    "k12-regression": lambda: table_from_records(synthetic(5, 12, regression=True)),
}


def assessed(name: str) -> dict:
    """Every split's intervals and verdicts (report.json's "uncertainty") of table `name`."""
    table = TABLES[name]()
    summaries = summarize(table)
    return {split: a.to_json() for split, a in assess(table, summaries).items()}


if __name__ == "__main__":
    # bootstrap.json stays as recorded at 1f2e09b; this writes today's verdicts and pairs
    out = {name: {split: {k: a[k] for k in ("verdicts", "baselines")}
                  for split, a in assessed(name).items()} for name in TABLES}
    (GOLDEN / "bootstrap-verdicts.json").write_text(json.dumps(out, indent=1, sort_keys=True)
                                                   + "\n")
    sys.exit(0)
