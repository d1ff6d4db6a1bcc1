"""Every link of a report folder's report.md and report.html, and those that do not resolve there.

A report is read where it is copied or uploaded (a run folder, an MLflow artifact tree, an
e-mail): its links must be relative and stay inside its own folder.
"""

import re
from pathlib import Path
from urllib.parse import unquote

MARKDOWN = re.compile(r"\]\(([^)\s]+)\)")
HTML = re.compile(r"""(?:href|src)=["']([^"']+)["']""")


def links(folder: Path) -> list[str]:
    """The link targets of the report in `folder`, less in-page anchors and inline images."""
    found = MARKDOWN.findall((folder / "report.md").read_text(encoding="utf-8"))
    found += HTML.findall((folder / "report.html").read_text(encoding="utf-8"))
    return [unquote(t) for t in found if not t.startswith(("#", "data:"))]


def broken(folder: Path) -> list[str]:
    """The targets that are absolute, leave `folder`, or name no file in it."""
    root = folder.resolve()
    bad = []
    for target in links(folder):
        path = (folder / target).resolve()
        if (Path(target).is_absolute() or "://" in target or root not in path.parents
                or not path.is_file()):
            bad.append(target)
    return bad


#: An abbreviation of the report: two or more capitals (QoI, PUI, JI, CI), a set (U⁺), DS-n.
ABBREVIATION = re.compile(r"(?<![\w/.\-])([A-Z][A-Za-z]*[A-Z][⁺⁻]?|[A-Z][⁺⁻]|DS-\d)"
                          r"(?![\w/\-]|\.\w)")
#: The glossary section report.md closes with (`pflpipe.report.glossary`).
GLOSSARY = "## Words and abbreviations"
#: Words in capitals that are names of things (formats, tools, algorithms), not abbreviations
#: of the report to define.
NAMES = {"CSV", "HTML", "JSON", "PNG", "MLflow", "KFP", "ID", "URL", "CPU", "GPU", "SGD", "PersFL",
         "APFL", "SCAFFOLD", "MAML"}


def undefined_abbreviations(folder: Path) -> list[str]:
    """The abbreviations report.md uses that its glossary does not define (bold, line's start)."""
    text = (folder / "report.md").read_text(encoding="utf-8")
    body, _, glossary = text.partition(GLOSSARY)
    defined = set(re.findall(r"^- \*\*(.+?)\*\* — ", glossary, flags=re.M))
    return sorted(set(ABBREVIATION.findall(body)) - defined - NAMES)
