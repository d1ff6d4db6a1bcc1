"""How the CLI lays out its text: no line wider than `WIDTH` (details belong in the report)."""

import textwrap

#: The widest line a verb prints; longer text wraps.
WIDTH = 160


def wrap(text: str, indent: int = 0, width: int = WIDTH) -> list[str]:
    """`text` in lines of at most `width` characters, continued `indent` spaces in.

    Words longer than a line (a path, a URL) are kept whole.

    >>> wrap("  done " + "word " * 40, 4, 60)[1]
    '    word word word word word word word word word word word'
    """
    return textwrap.wrap(text, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def paragraphs(text: str) -> str:
    """Every line of `text` wrapped at `WIDTH`, joined again."""
    return "\n".join(line for paragraph in text.splitlines() for line in wrap(paragraph))
