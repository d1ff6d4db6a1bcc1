"""Notes the report puts beside a table where one of its numbers means less than it seems."""

from pflpipe.metrics.table import ResultsTable


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
