"""The one Markdown table renderer: stage summaries, the report and the spec reference use it."""

from collections.abc import Collection, Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "",
          best: Collection[tuple[int, int]] = ()) -> list[str]:
    r"""Return the lines of a GitHub-flavoured Markdown table.

    Args:
        header: the column titles.
        rows: the cells, turned into text with `str` (a ``|`` in a cell must come escaped).
        align: one letter per column, ``l`` (left, the default) or ``r`` (right).
        best: (row, column) cells set in bold.

    >>> print("\n".join(table(["model", "accuracy"], [["fedavg", "0.91"]], "lr", {(0, 1)})))
    | model | accuracy |
    |---|---:|
    | fedavg | **0.91** |
    """
    align = align.ljust(len(header), "l")
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(f"**{c}**" if (i, j) in best else str(c)
                                for j, c in enumerate(row)) + " |"
              for i, row in enumerate(rows)]
    return lines
