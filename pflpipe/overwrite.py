"""The one rule by which a command writes into a directory or a file the user names.

`pflpipe report -o`, `personalize-new -o`, `split -o`, `split --export`, `compile -o` and
`schema -o` write their target only when it is missing or empty, or holds nothing but what the same
command wrote there before (that is replaced). Anything else there (a finished run's report, grid
or partition, the user's own files) is named and left untouched, and the command stops with exit
code 2, unless the user passes `--force`.

A command records what it wrote into a directory in `layout.WRITTEN_JSON`; a file it writes is
recognised by its content (`claim_file`'s `ours`).
"""

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pflpipe.errors import PflpipeError
from pflpipe.layout import RUNS, WRITTEN_JSON


class OverwriteError(PflpipeError):
    """Writing would replace files the command did not write (exit code 2: pick another path)."""

    bad_input = True


@dataclass(frozen=True)
class Claim:
    """A directory a command may write into; `record` says afterwards what it wrote there."""

    path: Path
    writer: str

    def record(self, written: Iterable[Path | str]) -> None:
        """Remember what the writer wrote: paths inside `path`, or names (str) relative to it."""
        entries = sorted({p if isinstance(p, str) else Path(os.path.relpath(p, self.path)).parts[0]
                          for p in written} - {WRITTEN_JSON})
        (self.path / WRITTEN_JSON).write_text(json.dumps(
            {"writer": self.writer, "entries": entries}, indent=2) + "\n", encoding="utf-8")


def claim_dir(path: Path, writer: str, *, force: bool, option: str = "-o",
              keep: Iterable[str] = (), writes: Callable[[str], bool] = lambda name: False,
              ) -> Claim:
    """Make directory `path` ready for `writer` (e.g. "pflpipe report"); raise if it is not ours.

    What `writer` recorded there before is removed (so nothing stale of it remains); entries named
    in `keep` are neither ours nor foreign (what an exported app writes beside its export). Any
    other entry is an `OverwriteError` naming it, unless `force`: then the foreign entries the
    writer `writes` (by name) are removed too and the rest stay beside the new files.
    """
    path = Path(path)
    if path.is_dir():
        present = {entry.name for entry in path.iterdir()} - {WRITTEN_JSON, *keep}
        ours = _recorded(path, writer)
        foreign = sorted(present - ours)
        if foreign and not force:
            raise OverwriteError(f"{path} holds {_what(path, foreign)} that `{writer}` did not "
                                 f"write; writing there would replace or mix with them. "
                                 f"{_fix(option, 'directory')}")
        for name in (ours | ({n for n in foreign if writes(n)} if force else set())) & present:
            _remove(path / name)
    return Claim(path, writer)


def claim_file(path: Path, writer: str, *, force: bool, ours: Callable[[str], bool],
               option: str = "-o") -> None:
    """Raise unless file `path` is missing, empty or, by its text (`ours`), one `writer` wrote."""
    path = Path(path)
    if force or not path.exists():
        return
    if path.is_dir():
        raise OverwriteError(f"{option} {path}: is a directory; name the file to write "
                             f"(e.g. {path / 'name'}) instead")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = None
    if text is not None and (not text.strip() or ours(text)):
        return
    raise OverwriteError(f"{path} exists{_run(path)} and `{writer}` did not write it; writing "
                         f"there would replace it. {_fix(option, 'file')}")


def _recorded(path: Path, writer: str) -> set[str]:
    """The entries `writer` recorded in `path` (none when another command wrote the record)."""
    try:
        record = json.loads((path / WRITTEN_JSON).read_text(encoding="utf-8"))
        entries = record["entries"] if record["writer"] == writer else []
        return {name for name in entries if isinstance(name, str) and "/" not in name
                and name not in ("", ".", "..")}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _what(path: Path, foreign: list[str]) -> str:
    """The entries in words, with the run they belong to."""
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    return f"files{_run(path)} ({shown})"


def _run(path: Path) -> str:
    """Name the run whose folder (``runs/<run>/...``) holds `path`, if one does."""
    parts = path.resolve().parts
    at = max((i for i, part in enumerate(parts[:-1]) if part == RUNS), default=None)
    return "" if at is None else f" of run {parts[at + 1]!r}"


def _fix(option: str, kind: str) -> str:
    if kind == "file":
        return f"Choose another {option} file, or pass --force to replace it"
    return (f"Choose another {option} directory, or pass --force to write there anyway (files of "
            "the same names are replaced)")


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
