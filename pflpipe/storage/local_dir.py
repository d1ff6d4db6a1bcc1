"""A Store on the local file system."""

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class LocalStore:
    """Keys are files under a root directory; writes are atomic (temp file + rename)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = self.root.as_uri()

    def _path(self, key: str) -> Path:
        path = (self.root / key.strip("/")).resolve()
        if path != self.root and self.root not in path.parents:
            raise ValueError(f"key {key!r} leaves the store root {self.root}")
        return path

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` under `key` atomically."""
        self.put_with(key, lambda handle: handle.write(data))

    def put_with(self, key: str, write: Callable[[BinaryIO], object]) -> None:
        """Write under `key` atomically what `write` writes into the file it is given.

        What it writes goes to the disk as it goes, never held whole in memory (`put_bytes`
        needs it as bytes first).
        """
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def link(self, key: str, path: str | Path) -> None:
        """Make `key` a hard link of the file `path` (a copy on another file system)."""
        from pflpipe.layout import link_file

        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        link_file(Path(path), target)

    def local_path(self, key: str) -> Path:
        """The file that holds `key` (FileNotFoundError when there is none)."""
        return self._file(key)

    def _file(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"{key!r} not found in {self.uri}")
        return path

    def get_bytes(self, key: str) -> bytes:
        """Read the object under `key`."""
        return self._file(key).read_bytes()

    def exists(self, key: str) -> bool:
        """Whether `key` exists."""
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        """Remove `key` (no error when it is absent)."""
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        """Keys under `prefix`, sorted (temporary files excluded)."""
        base = self._path(prefix) if prefix else self.root
        if base.is_file():
            return [prefix.strip("/")]
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith("."))

    def child(self, prefix: str) -> "LocalStore":
        """Return a store rooted at `prefix`."""
        return LocalStore(self._path(prefix))
