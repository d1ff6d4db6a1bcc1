"""Where checkpoints and artifacts live: a local directory or an S3-compatible object store.

Only this package imports boto3, and only inside `pflpipe.storage.s3`, which `open_store` loads
when a spec asks for S3, so importing this package stays light.
"""

import os
import urllib.parse
import urllib.request
from pathlib import Path

from pflpipe.storage.local_dir import LocalStore
from pflpipe.storage.store_protocol import Store, download_dir, upload_dir


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


def check_store(storage_spec) -> None:
    """Raise StorageError within seconds when the spec's S3 store does not answer.

    `pflpipe run` calls it before the pipeline starts, so a store that is down, silent or
    missing its bucket is reported before any stage computes. A local store needs no check.
    """
    if storage_spec.kind == "s3":
        from pflpipe.storage.s3 import S3Store

        S3Store.from_spec(storage_spec).check_reachable()


#: The environment variables (boto3's own names, first one set wins) that give the endpoint of an
#: S3 store named by its URI alone (`open_uri`): a URI holds a bucket and a prefix, never an
#: endpoint or credentials.
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def open_uri(uri: str) -> Store:
    """Return the store at `uri`: ``s3://bucket/prefix``, ``file:///path`` or a local path.

    An S3 store takes its endpoint from the first of `ENDPOINT_ENV` that is set (AWS itself
    otherwise), its region and credentials from boto3's default chain (AWS_DEFAULT_REGION,
    AWS_ACCESS_KEY_ID, ...), as a process that was handed only the URI can.
    """
    if uri.startswith("s3://"):
        from pflpipe.storage.s3 import S3Store, parse_s3_uri

        bucket, prefix = parse_s3_uri(uri)
        endpoint = next((os.environ[name] for name in ENDPOINT_ENV if os.environ.get(name)), None)
        return S3Store(bucket, prefix, endpoint_url=endpoint)
    if uri.startswith("file:"):
        parsed = urllib.parse.urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"not a local file URI (host {parsed.netloc!r}): {uri}")
        return LocalStore(urllib.request.url2pathname(parsed.path))
    if "://" in uri:
        raise ValueError(f"not a store URI: {uri} (expected s3://bucket/prefix, file:///path or "
                         "a local path)")
    return LocalStore(uri)


def upload_results(spec, directory: str | Path, name: str) -> list[str]:
    """Copy a results directory into the spec's S3 store under ``results/<name>/``.

    A local store needs no copy: `pflpipe run` publishes the same directories into the results
    directory. A later run of the spec overwrites the keys, as it does the local copies.
    """
    if spec.storage.kind != "s3":
        return []
    store = open_store(spec.storage, default_root=spec.experiment.results_dir)
    return upload_dir(store, Path(directory), f"results/{name}")


__all__ = ["ENDPOINT_ENV", "LocalStore", "Store", "check_store", "download_dir", "open_store",
           "open_uri", "upload_dir", "upload_results"]
