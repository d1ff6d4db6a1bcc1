"""Where checkpoints and artifacts live: a local directory or an S3-compatible object store.

Only this package imports boto3, and only inside `pflpipe.storage.s3`, which `open_store` loads
when a spec asks for S3, so importing this package stays light.
"""

from pathlib import Path

from pflpipe.storage.base import Store, download_dir, upload_dir
from pflpipe.storage.local import LocalStore


def open_store(storage_spec, default_root: str | Path) -> Store:
    """Return the store a spec's ``storage`` section names.

    Args:
        storage_spec: a ``LocalStorage`` or ``S3Storage`` section.
        default_root: the local directory used when ``storage.path`` is omitted.

    """
    if storage_spec.kind == "s3":
        from pflpipe.storage.s3 import S3Store

        return S3Store.from_spec(storage_spec)
    return LocalStore(storage_spec.path or default_root)


def upload_results(spec, directory: str | Path, name: str) -> list[str]:
    """Copy a results directory into the spec's S3 store under ``results/<name>/``.

    A local store needs no copy: `pflpipe run` publishes the same directories into the results
    directory. A later run of the spec overwrites the keys, as it does the local copies.
    """
    if spec.storage.kind != "s3":
        return []
    store = open_store(spec.storage, default_root=spec.experiment.results_dir)
    return upload_dir(store, Path(directory), f"results/{name}")


__all__ = ["LocalStore", "Store", "download_dir", "open_store", "upload_dir", "upload_results"]
