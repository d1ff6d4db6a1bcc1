"""The one rule by which a command writes into a directory or a file the user names.

`pflpipe report -o`, `personalize-new -o`, `split -o`, `split --export`, `compile -o` and
`schema -o` record what they wrote: every file's path and SHA-256, in `layout.WRITTEN_JSON` inside
a directory, or in `layout.written_record(name)` beside a single file. A command writes its target
only when it is missing or empty, or holds nothing but files the same command wrote there and
nobody changed since, at the top level and in every subfolder; those are removed first, so
nothing stale of them remains. Anything else (another command's or a finished run's files, the
user's own, a file the user edited) is named, nothing is touched, and the command stops with exit
code 2, unless the user passes `--force`: then the command replaces only the files it writes, by
name, and removes nothing else.
"""

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe.errors import PflpipeError
from pflpipe.layout import RUNS, WRITTEN_JSON, written_record


class OverwriteError(PflpipeError):
    """Writing would replace files the command did not write (exit code 2: pick another path)."""

    bad_input = True


@dataclass(frozen=True)
class Claim:
    """A directory a command may write into; `record` says afterwards what it wrote there."""

    path: Path
    writer: str
    #: The files found there that are not the writer's (kept under --force): path -> SHA-256.
    foreign: dict[str, str | None] = field(default_factory=dict)

    def record(self, written: Iterable[Path | str]) -> None:
        """Remember the files written: paths inside `path`, or names (str) relative to it.

        A directory stands for every file below it, except the foreign ones left as they were.
        """
        files = {}
        for entry in written:
            for file in _files(self.path / entry if isinstance(entry, str) else Path(entry)):
                name = Path(os.path.relpath(file, self.path)).as_posix()
                digest = _digest(file)
                if name != WRITTEN_JSON and self.foreign.get(name, "") != digest:
                    files[name] = digest
        _write_record(self.path / WRITTEN_JSON, self.writer, dict(sorted(files.items())))


@dataclass(frozen=True)
class FileClaim:
    """A file a command may write; `record` remembers its content afterwards."""

    path: Path
    writer: str

    def make_folder(self) -> str | None:
        """Create the file's folder when it is missing; say so (None when it was there)."""
        if self.path.parent.is_dir():
            return None
        self.path.parent.mkdir(parents=True)
        return f"created the folder {self.path.parent}/ (it did not exist)"

    def record(self) -> None:
        """Remember the written file's content (beside it), so an edit of it is recognised."""
        _write_record(self.path.with_name(written_record(self.path.name)), self.writer,
                      {self.path.name: _digest(self.path)})


def claim_dir(path: Path, writer: str, *, force: bool, option: str = "-o",
              keep: Iterable[str] = ()) -> Claim:
    """Make directory `path` ready for `writer` (e.g. "pflpipe report"); raise if it is not ours.

    The unchanged files `writer` recorded there before are removed (so nothing stale of it
    remains); top-level entries named in `keep` are neither ours nor foreign (what an exported app
    writes beside its export). Any other file, in any subfolder, is an `OverwriteError` naming
    it, unless `force`: then it stays, and only the files the writer writes replace theirs.
    """
    path = Path(path)
    check_directory(path, option)
    if not path.is_dir():
        return Claim(path, writer)
    recorded = _recorded(path / WRITTEN_JSON, writer)
    ours, foreign = [], {}
    for name, file in _walk(path, skip={WRITTEN_JSON, *keep}):
        digest = _digest(file)
        if digest is not None and recorded.get(name) == digest:
            ours.append(file)
        else:
            foreign[name] = digest
    if foreign and not force:
        edited = [name for name in foreign if name in recorded]
        other = [name for name in foreign if name not in recorded]
        found = ([f"files{_run(path)} ({_what(path, other)}) that `{writer}` did not write"]
                 if other else []) + ([f"files `{writer}` wrote that were changed since "
                                       f"({_listed(edited)})"] if edited else [])
        older = (" (its record of them, from an older pflpipe, holds no hashes: pass --force "
                 "once if they are all its own)" if _legacy(path / WRITTEN_JSON, writer) else "")
        raise OverwriteError(f"{path} holds {' and '.join(found)}{older}; writing there would "
                             f"replace or mix with them. {_fix(option, 'directory')}")
    for file in ours:
        file.unlink()
        _prune(file.parent, path)
    return Claim(path, writer, foreign)


def claim_file(path: Path, writer: str, *, force: bool, option: str = "-o") -> FileClaim:
    """Raise unless file `path` is missing, empty or what `writer` wrote there, unchanged."""
    path = Path(path)
    _check_parent(path, option, "file")
    if path.is_dir():
        raise OverwriteError(f"{option} {path}: is a directory; name the file to write "
                             f"(e.g. {path / 'name'}) instead")
    if force or not path.exists():
        return FileClaim(path, writer)
    digest = _digest(path)
    recorded = _recorded(path.with_name(written_record(path.name)), writer).get(path.name)
    if digest is not None and (digest == recorded or _blank(path)):
        return FileClaim(path, writer)
    what = (f"`{writer}` wrote it, but it was changed since" if recorded
            else f"`{writer}` did not write it")
    raise OverwriteError(f"{path} exists{_run(path)} and {what}; writing there would replace "
                         f"it. {_fix(option, 'file')}")


def check_directory(path: Path, option: str) -> None:
    """Raise unless `path` can be a directory: it is one, or is missing below folders.

    Called before any work: a file given where a folder is meant fails at once, not after
    training.
    """
    path = Path(path)
    _check_parent(path, option, "directory")
    if path.exists() and not path.is_dir():
        raise OverwriteError(f"{option} {path}: is a file, and {option} names a directory; "
                             f"name a directory instead (e.g. {option} {path.with_suffix('')})")


def _check_parent(path: Path, option: str, kind: str) -> None:
    """Refuse a path below a file (a missing folder is made, and the command says so)."""
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise OverwriteError(f"{option} {path}: {parent} is a file, not a folder; name a "
                                     f"{kind} outside it")
            return


#: Folders no command writes and none of the user's work is in: Python's bytecode caches (an
#: exported app that ran leaves them beside its modules). Neither ours nor foreign.
CACHES = ("__pycache__",)


def _walk(path: Path, skip: set[str]) -> Iterator[tuple[str, Path]]:
    """Every file, link or other non-directory below `path`, as (relative name, path)."""
    for root, dirs, files in os.walk(path):
        here = Path(root)
        links = [d for d in dirs if (here / d).is_symlink()]   # a link is an entry, not followed
        dirs[:] = sorted(d for d in dirs if d not in links and d not in CACHES
                         and not (here == path and d in skip))
        for name in sorted(files + links):
            if not (here == path and name in skip):
                yield (here / name).relative_to(path).as_posix(), here / name


def _files(path: Path) -> list[Path]:
    if path.is_dir() and not path.is_symlink():
        return [file for _, file in _walk(path, set())]
    return [path] if path.exists() else []


def _digest(path: Path) -> str | None:
    """The SHA-256 of a regular file's bytes; None for a link, a device or an unreadable file."""
    if path.is_symlink() or not path.is_file():
        return None
    sha = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
    except OSError:
        return None
    return sha.hexdigest()


def _blank(path: Path) -> bool:
    return path.stat().st_size < 4096 and not path.read_bytes().strip()


def _write_record(file: Path, writer: str, files: dict[str, str | None]) -> None:
    file.write_text(json.dumps({"writer": writer, "files": files}, indent=1) + "\n",
                    encoding="utf-8")


def _recorded(file: Path, writer: str) -> dict[str, str]:
    """The files and hashes `writer` recorded (none when another command wrote the record)."""
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        files = record["files"] if record["writer"] == writer else {}
        return {name: digest for name, digest in files.items()
                if isinstance(name, str) and isinstance(digest, str)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _legacy(file: Path, writer: str) -> bool:
    """Whether `writer`'s record there is an older pflpipe's (top-level names, no hashes)."""
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        return record.get("writer") == writer and "files" not in record
    except (OSError, ValueError, AttributeError):
        return False


def _prune(folder: Path, top: Path) -> None:
    """Remove `folder` and its parents below `top` while they are empty."""
    while folder != top and top in folder.parents and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def _what(path: Path, foreign: list[str]) -> str:
    """The foreign files in words; a top-level folder alone when all of it is foreign."""
    tops: dict[str, list[str]] = {}
    for name in foreign:
        tops.setdefault(name.split("/")[0], []).append(name)
    shown = []
    for top, names in sorted(tops.items()):
        whole = (path / top).is_dir() and not (path / top).is_symlink() and len(names) == len(
            _files(path / top))
        shown += [top] if whole or names == [top] else names
    return _listed(shown)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _run(path: Path) -> str:
    """Name the run whose folder (``runs/<run>/...``) holds `path`, if one does."""
    parts = path.resolve().parts
    at = max((i for i, part in enumerate(parts[:-1]) if part == RUNS), default=None)
    return "" if at is None else f" of run {parts[at + 1]!r}"


def _fix(option: str, kind: str) -> str:
    if kind == "file":
        return f"Choose another {option} file, or pass --force to replace it"
    return (f"Choose another {option} directory, or pass --force to write there anyway (the files "
            "it writes are replaced by name; nothing else is touched)")
