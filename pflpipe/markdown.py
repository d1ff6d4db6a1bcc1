"""The one Markdown table renderer: stage summaries, the report and the spec reference use it.

Also `replace_section`: the benchmarks' way to rewrite their own part of a document.
"""

from collections.abc import Collection, Sequence
from pathlib import Path


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


def replace_section(path: Path, section: str, begin: str, end: str) -> None:
    r"""Put `section` in place of `path`'s part from `begin` to `end`, the markers included.

    `section` starts with `begin` and ends with `end`; a `path` without the markers gets it
    appended. The rest of `path` stays as it was.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "doc.md"
    >>> _ = path.write_text("intro\n<!-- b -->old<!-- e -->\nrest\n")
    >>> replace_section(path, "<!-- b -->new<!-- e -->", "<!-- b -->", "<!-- e -->")
    >>> path.read_text()
    'intro\n<!-- b -->new<!-- e -->\nrest\n'
    """
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)
