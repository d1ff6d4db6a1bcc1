"""Reading and writing the CSV tables of the stages, without the training stages' imports.

`evaluate_fairness`, `collect_results` and `select_teachers` read and write tables but train
nothing, so they must not pay for the training helpers (torch, the engine) at start-up.
"""

import csv
from pathlib import Path


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV written by a stage."""
    with Path(path).open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    """Write `rows` as a CSV with the columns `fields` (other keys of a row are ignored).

    Rows with a ``client`` are written client by client, each client's in their given order:
    so the merged tables of client shards equal the unsharded ones (`pflpipe.stages.merge_shards`).
    """
    if "client" in fields:
        rows = sorted(rows, key=lambda row: int(row["client"]))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
