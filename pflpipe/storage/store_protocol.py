"""The object-store interface checkpoints and results are written through."""

from pathlib import Path
from typing import Protocol


class Store(Protocol):
    """A flat key → bytes store under a root (a local directory or an S3 prefix).

    Keys use '/' separators and are relative to the store's root. Missing keys raise
    FileNotFoundError naming the key and the store.
    """

    uri: str

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` under `key` (atomically: a reader never sees half an object)."""

    def get_bytes(self, key: str) -> bytes:
        """Read the object under `key`."""

    def exists(self, key: str) -> bool:
        """Whether `key` exists."""

    def delete(self, key: str) -> None:
        """Remove `key` (no error when it is absent)."""

    def list(self, prefix: str = "") -> list[str]:
        """Keys under `prefix`, sorted."""

    def child(self, prefix: str) -> "Store":
        """Return a store rooted at `prefix` inside this one."""


def upload_dir(store: Store, directory: Path, prefix: str = "") -> list[str]:
    """Copy every file under `directory` into `store` under `prefix`; return the keys."""
    keys = []
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(directory).as_posix()]))
        store.put_bytes(key, path.read_bytes())
        keys.append(key)
    return keys


def download_dir(store: Store, prefix: str, directory: Path) -> list[Path]:
    """Copy every object under `prefix` into `directory`; return the written paths."""
    paths = []
    prefix = prefix.strip("/")
    for key in store.list(prefix):
        relative = key[len(prefix):].lstrip("/") if prefix else key
        path = Path(directory) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get_bytes(key))
        paths.append(path)
    return paths
