"""A Store on the local file system."""

import os
import tempfile
from pathlib import Path


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
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
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

    def get_bytes(self, key: str) -> bytes:
        """Read the object under `key`."""
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"{key!r} not found in {self.uri}")
        return path.read_bytes()

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
