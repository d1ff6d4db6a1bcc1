"""Where checkpoints and artifacts live: a local directory or an S3-compatible object store.
Only this package imports boto3 (lazily, in `pflpipe.storage.s3`)."""

from pflpipe.storage.base import Store, download_dir, upload_dir
from pflpipe.storage.local import LocalStore

__all__ = ["LocalStore", "Store", "download_dir", "upload_dir"]
