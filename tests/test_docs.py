"""README.md and docs/*.md stay true: what they show runs, and what the report says is defined.

- no generated block (`<!-- pages: NAME begin/end -->`, benchmarks/pages.py) is empty;
- every `pflpipe ...` command in a code block parses with the CLI's own parser, and every spec
  file it names exists and validates, with the command's `--set` overrides (nothing trains);
- every abbreviation of the report (the metric registry and `pflpipe.report.glossary`) is
  defined in docs/reading-the-report.md, and a report's text uses no other;
- the README is at most 120 lines and links every docs page exactly once; docs/index.md lists
  every page once.
"""

import re
import shlex
from pathlib import Path

import pytest
from report_links import ABBREVIATION, NAMES, undefined_abbreviations

from pflpipe.cli import build_parser, main
from pflpipe.metrics import pairwise
from pflpipe.metrics.results_table import table_from_records
from pflpipe.metrics.summary import BEST_RULE, FAIREST_RULE
from pflpipe.report import glossary
from pflpipe.report import stability_section as stability
from pflpipe.report.report_writer import build_report, write_report

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
READING = REPO / "docs" / "reading-the-report.md"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
#: A command of the CLI in a code block: at a line's start, after `$ ` or `&&`, with any path.
COMMAND = re.compile(r"(?:^|&&\s*|\$\s+)(?:\S*/)?pflpipe\s+(.*)$")
#: Spec files a page shows only as an example of an error message, never as a file to run.
ILLUSTRATIONS = {"bad.yaml"}
#: Where a shown command's own arguments end: the shell's redirections and pipes.
SHELL = {">", ">>", "<", "|", "&&", ";"}
GENERATED = re.compile(r"<!-- pages: (\S+) begin -->(.*?)<!-- pages: \1 end -->", re.S)


def commands(text: str) -> list[str]:
    """The `pflpipe` commands shown in the code blocks of a page (continuations joined)."""
    found = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            if match := COMMAND.search(line.strip()):
                found.append(match.group(1))
    return found


def empty_blocks(text: str) -> list[str]:
    return [name for name, body in GENERATED.findall(text) if not body.strip()]


def is_placeholder(arg: str) -> bool:
    """``SPEC``, ``DIR``: a word the reader replaces."""
    return re.fullmatch(r"[A-Z][A-Z_.]*", arg) is not None


SHOWN = [(page.relative_to(REPO).as_posix(), command)
         for page in PAGES for command in commands(page.read_text(encoding="utf-8"))]


def test_command_collector_finds_chained_and_prompted_commands():
    text = ("```\npython3 -m venv .venv && .venv/bin/pflpipe run specs/x.yaml\n"
            "$ pflpipe validate bad.yaml\nbad.yaml:7: error\npflpipe split SPEC \\\n"
            "  --export flower DIR\n```\nnot in a block: pflpipe run y.yaml\n")
    assert commands(text) == ["run specs/x.yaml", "validate bad.yaml",
                              "split SPEC    --export flower DIR"]


def test_empty_block_check_sees_markers_with_nothing_between():
    assert empty_blocks("<!-- pages: a begin -->\n\n<!-- pages: a end -->\n"
                        "<!-- pages: b begin -->\nx\n<!-- pages: b end -->") == ["a"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_generated_block_is_empty(page):
    assert empty_blocks(page.read_text(encoding="utf-8")) == [], (
        f"{page.name}: a generated block is empty; run benchmarks/pages.py for it or remove it")


def test_the_pages_show_commands_to_check():
    verbs = {command.split()[0] for _, command in SHOWN}
    assert {"run", "validate", "submit", "compile", "split", "personalize-new"} <= verbs


@pytest.mark.parametrize(("page", "command"), SHOWN, ids=[f"{p}: {c[:50]}" for p, c in SHOWN])
def test_shown_command_parses_and_its_spec_validates(page, command, capsys):
    argv = shlex.split(command, comments=True)
    argv = argv[:next((i for i, a in enumerate(argv) if a in SHELL), len(argv))]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{page}: `pflpipe {command}` does not parse: {capsys.readouterr().err}")
    specs = [str(s) for s in getattr(args, "specs", None) or [getattr(args, "spec", None)] if s]
    specs = [s for s in specs if not is_placeholder(s) and s not in ILLUSTRATIONS]
    for spec in specs:
        assert (REPO / spec).is_file(), f"{page}: `pflpipe {command}` names {spec}, not shipped"
    if specs:
        overrides = [a for value in getattr(args, "set", []) for a in ("--set", value)]
        code = main(["validate", *(str(REPO / s) for s in specs), *overrides])
        assert code == 0, f"{page}: `pflpipe {command}`: {capsys.readouterr().err}"


def test_reading_the_report_defines_every_abbreviation_of_the_report():
    page = READING.read_text(encoding="utf-8")
    undefined = [name for name in glossary.names() if f"**{name}**" not in page]
    assert undefined == [], f"define these in {READING.name}: {undefined}"


def used(text: str) -> set[str]:
    return set(ABBREVIATION.findall(text)) - NAMES


def test_the_report_rules_use_only_abbreviations_the_glossary_defines():
    texts = [BEST_RULE, FAIREST_RULE, pairwise.RULE, stability.RULE,
             *glossary.TERMS.values(), *(glossary.definition(n) for n in glossary.names())]
    assert used(" ".join(texts)) - set(glossary.names()) == set()


#: Percent, one seed, four clients; persfl improves clients 0, 1 and 3, fedper 0 and 2.
TABLE = [{"client": c, "model": m, "accuracy": a} for c, row in enumerate(
    [(60, 70, 80, 75), (70, 65, 75, 60), (65, 50, 60, 70), (55, 60, 66, 58)])
    for m, a in zip(("local", "fedavg", "persfl", "fedper"), row, strict=True)]


def test_a_report_defines_every_abbreviation_it_uses_and_the_page_does_too(tmp_path):
    report = build_report(table_from_records(TABLE))
    write_report(report, tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")

    assert undefined_abbreviations(tmp_path) == []
    page = READING.read_text(encoding="utf-8")
    assert sorted(n for n in used(text) if f"**{n}**" not in page) == []
    # each metric table has its legend under it
    assert text.count("*Legend:* PUI = % of clients improved (higher is better)") == 1
    assert "| AV ↓ |" in text and "*Legend:* AV = average variance (lower is better)" in text


def test_undefined_abbreviations_are_found(tmp_path):
    (tmp_path / "report.md").write_text("QoI and XYZ over U⁺.\n\n## Words and abbreviations\n\n"
                                        "- **QoI** — quantum of improvement\n")
    assert undefined_abbreviations(tmp_path) == ["U⁺", "XYZ"]


def links_to(text: str, page: str) -> int:
    return len(re.findall(rf"\]\((?:\./)?{re.escape(page)}(?:#[^)]*)?\)", text))


def test_readme_is_short_and_links_every_docs_page_exactly_once():
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120
    counts = {page.name: links_to(readme, f"docs/{page.name}") for page in DOCS}
    assert {name: n for name, n in counts.items() if n != 1} == {}
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert {p for p in linked if not (REPO / p).is_file()} == set()


def test_docs_index_lists_every_page_once_under_its_kind():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    kinds = re.findall(r"^## (.+)$", index, flags=re.M)
    assert kinds == ["Tutorial", "How-to guides", "Reference", "Explanation"]
    counts = {page.name: links_to(index, page.name) for page in DOCS if page.name != "index.md"}
    assert {name: n for name, n in counts.items() if n != 1} == {}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_spec_file_a_page_names_is_shipped(page):
    named = set(re.findall(r"\bspecs/[\w.-]+\.yaml\b", page.read_text(encoding="utf-8")))
    assert sorted(n for n in named if not (REPO / n).is_file()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_of_a_page_resolves(page):
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    local = [t.split("#")[0] for t in targets if "://" not in t and not t.startswith("#")]
    assert [t for t in local if not (page.parent / t).exists()] == []
