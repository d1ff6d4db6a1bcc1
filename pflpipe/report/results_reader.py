"""Reading results tables from CSV files (results.csv of every stage, or the user's own).

The table's columns and rules are `pflpipe.metrics.results_table`'s; this module only reads the
files, names each error's file and line (the header is line 1), and joins the files' tables.
"""

import csv
from collections.abc import Sequence
from pathlib import Path

from pflpipe.errors import DataError, not_utf8
from pflpipe.metrics.results_table import (
    REQUIRED,
    ResultsTable,
    check_unit,
    concat,
    table_from_records,
)


def read_table(paths: Sequence[Path | str], unit: str = "auto") -> ResultsTable:
    """Read and validate one or more CSV tables and concatenate them.

    Args:
        paths: The CSV files.
        unit: One of `UNITS`: "auto" detects each file's unit (see
            `pflpipe.metrics.results_table`).

    Raises:
        DataError: a file is missing or unreadable, a column is missing, a value is invalid,
            a row repeats, or the files use different accuracy units.

    """
    if not paths:
        raise DataError("no results table given; pass at least one CSV file")
    check_unit(unit)
    table = concat([_read_one(Path(path), unit) for path in paths])
    return ResultsTable(table.rows, table.unit, tuple(str(p) for p in paths))


def _read_one(path: Path, unit: str) -> ResultsTable:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = [name.strip() for name in reader.fieldnames or []]
            missing = [name for name in REQUIRED if name not in columns]
            if missing:
                raise DataError(
                    f"{path}: missing column(s) {', '.join(missing)} (found: "
                    f"{', '.join(columns) or 'no header'}); a results table needs the columns "
                    f"client, model, accuracy and may have seed, split, selection, loss, "
                    f"n_samples, round, scope"
                )
            records = [{k.strip(): v for k, v in rec.items() if k} for rec in reader]
    except FileNotFoundError as err:
        raise DataError(f"{path}: no such results table") from err
    except UnicodeDecodeError as err:
        problem = not_utf8(err, " (Excel: Save As, CSV UTF-8)")
        raise DataError(f"{path}: the results table {problem}") from None
    except (OSError, csv.Error) as err:
        raise DataError(f"{path}: cannot read the results table: {err}") from err
    return table_from_records(records, str(path), unit, line=lambda i: f"{path}:{i + 2}",
                              unique=False)
