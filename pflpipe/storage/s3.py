"""A Store on an S3-compatible object store (AWS S3, MinIO, Ceph), through boto3.

Credentials come only from boto3's default chain: the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; on a cluster mounted from the Kubernetes secret named in
``storage.secret_name``), a shared credentials file or an instance role. The spec never holds them.

Transient failures (connection refused or reset, timeouts, HTTP 5xx, throttling) are retried with
bounded exponential backoff. This module owns the only retry loop: botocore's own retries are
turned off so that the attempt count in an error message is the true one and the longest wait is
predictable. Every other failure becomes a StorageError that names the endpoint, the bucket and,
where there is one, the key.
"""

import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pflpipe.errors import StorageError

log = logging.getLogger(__name__)
T = TypeVar("T")

_AUTH_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed", "403", "401",
}
_MISSING_BUCKET_CODES = {"NoSuchBucket"}
_MISSING_KEY_CODES = {"NoSuchKey", "404", "NotFound"}
_TRANSIENT_CODES = {
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "SlowDown",
    "Throttling", "ThrottlingException", "RequestLimitExceeded", "InternalError",
    "ServiceUnavailable", "500", "502", "503", "504",
}
NO_CREDENTIALS = ("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a "
                  "Kubernetes secret via storage.secret_name)")


class AccessDenied(StorageError):
    """The store refused the credentials or the request (HTTP 401/403)."""


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` into ``(bucket, prefix)``.

    >>> parse_s3_uri("s3://data/mnist/raw/")
    ('data', 'mnist/raw')
    """
    if not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
        raise ValueError(f"not an s3:// URI with a bucket, e.g. s3://bucket/prefix (got {uri!r})")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, prefix.strip("/")


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class _Connection:
    """The boto3 client and settings that a store and its children share."""

    def __init__(self, bucket: str, endpoint_url: str | None, region: str | None,
                 max_attempts: int, backoff_s: float, connect_timeout: float,
                 read_timeout: float):
        import boto3
        from botocore.config import Config

        self.bucket, self.endpoint_url = bucket, endpoint_url
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
        config = Config(
            retries={"max_attempts": 1, "mode": "standard"},  # the retry loop is ours
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            region_name=region, signature_version="s3v4",
            # MinIO and Ceph serve buckets by path, not by virtual host.
            s3={"addressing_style": "path" if endpoint_url else "auto"},
        )
        self.client = boto3.session.Session().client("s3", endpoint_url=endpoint_url,
                                                     config=config)
        self._bucket_checked = False
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The endpoint, for messages."""
        return self.endpoint_url or f"the AWS endpoint of region {self.client.meta.region_name}"

    def call(self, operation: str, key: str | None, fn: Callable[[], T]) -> T:
        """Run one request with bounded exponential backoff on transient errors."""
        import botocore.exceptions as bex

        if not self._bucket_checked and operation != "access check":
            self.check_bucket()
        target = f"s3://{self.bucket}/{key}" if key is not None else f"bucket {self.bucket!r}"
        last: Exception | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except bex.NoCredentialsError as err:
                raise StorageError(f"{NO_CREDENTIALS}; needed for {operation} of {target} at "
                                   f"{self.where}") from err
            except (bex.ConnectionError, bex.HTTPClientError) as err:
                last = err
            except bex.ClientError as err:
                code = _code(err)
                if code not in _TRANSIENT_CODES:
                    raise self._client_error(operation, key, target, code, err) from err
                last = err
            if attempt < self.max_attempts:
                delay = self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random() / 2)
                log.warning("S3 %s of %s at %s failed (%s); retry %d/%d in %.1f s", operation,
                            target, self.where, last, attempt, self.max_attempts - 1, delay)
                time.sleep(delay)
        raise StorageError(
            f"S3 {operation} of {target} at {self.where} failed after {self.max_attempts} "
            f"attempts: {last}. Check that the endpoint is reachable; objects written before "
            "are untouched, and the same call can be repeated once it is back"
        ) from last

    def _client_error(self, operation: str, key: str | None, target: str, code: str,
                      err: Exception) -> Exception:
        if code in _AUTH_CODES:
            return AccessDenied(
                f"S3 refused the credentials for bucket {self.bucket!r} at {self.where} "
                f"({code}) during {operation} of {target}: check AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY (or the Kubernetes secret in storage.secret_name) and the "
                "bucket's access policy")
        if code in _MISSING_BUCKET_CODES or (key is None and code in _MISSING_KEY_CODES):
            return StorageError(
                f"bucket {self.bucket!r} does not exist at {self.where}: create it (e.g. "
                f"`aws s3 mb s3://{self.bucket}`) or fix storage.bucket")
        if key is not None and code in _MISSING_KEY_CODES:
            return FileNotFoundError(f"s3://{self.bucket}/{key} not found (endpoint {self.where})")
        return StorageError(f"S3 {operation} of {target} at {self.where} failed: {code}: {err}")

    def check_bucket(self) -> None:
        """Fail early, with a clear message, when the bucket is missing or credentials are absent.

        HeadBucket needs s3:ListBucket, which a policy scoped to a prefix may not grant, so a
        refusal here is left to the request itself to report.
        """
        with self._lock:
            if self._bucket_checked:
                return
            try:
                self.call("access check", None,
                          lambda: self.client.head_bucket(Bucket=self.bucket))
            except AccessDenied as err:
                log.debug("bucket check of %r refused (%s); the requests will tell", self.bucket,
                          err)
            self._bucket_checked = True


def _code(err: Exception) -> str:
    response = getattr(err, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


class S3Store:
    """Keys are objects under ``s3://bucket/prefix``. A put is atomic (S3 semantics)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, max_attempts: int = 5, backoff_s: float = 0.5,
                 connect_timeout: float = 5.0, read_timeout: float = 30.0,
                 _connection: _Connection | None = None):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be 1 or more (got {max_attempts})")
        self._conn = _connection or _Connection(bucket, endpoint_url, region, max_attempts,
                                                backoff_s, connect_timeout, read_timeout)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{_join(bucket, self.prefix)}"

    @classmethod
    def from_spec(cls, storage, **overrides) -> "S3Store":
        """Build the store of an ``S3Storage`` spec section."""
        settings = dict(prefix=storage.prefix, endpoint_url=storage.endpoint_url,
                        region=storage.region, max_attempts=storage.max_attempts)
        return cls(storage.bucket, **(settings | overrides))

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint_url={self._conn.endpoint_url!r})"

    @property
    def endpoint_url(self) -> str | None:
        """The endpoint the store talks to (None: AWS's own)."""
        return self._conn.endpoint_url

    def _key(self, key: str) -> str:
        if any(part == ".." for part in key.split("/")):
            raise ValueError(f"key {key!r} leaves the store root {self.uri}")
        full = _join(self.prefix, key)
        if not full:
            raise ValueError(f"empty key in {self.uri}")
        return full

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` under `key`."""
        full = self._key(key)
        self._conn.call("put", full, lambda: self._conn.client.put_object(
            Bucket=self.bucket, Key=full, Body=data))

    def get_bytes(self, key: str) -> bytes:
        """Read the object under `key`; FileNotFoundError when it is missing."""
        full = self._key(key)

        def read() -> bytes:
            return self._conn.client.get_object(Bucket=self.bucket, Key=full)["Body"].read()

        return self._conn.call("get", full, read)

    def exists(self, key: str) -> bool:
        """Whether `key` exists."""
        full = self._key(key)
        try:
            self._conn.call("head", full, lambda: self._conn.client.head_object(
                Bucket=self.bucket, Key=full))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        """Remove `key` (no error when it is absent)."""
        full = self._key(key)
        self._conn.call("delete", full, lambda: self._conn.client.delete_object(
            Bucket=self.bucket, Key=full))

    def list(self, prefix: str = "") -> list[str]:
        """Keys under `prefix` (a key or a folder, as in LocalStore), relative to the root."""
        return sorted(self._objects(prefix))

    def child(self, prefix: str) -> "S3Store":
        """Return a store rooted at `prefix`, sharing this store's client."""
        root = self._key(prefix) if prefix.strip("/") else self.prefix
        return S3Store(self.bucket, root, _connection=self._conn)

    def _objects(self, prefix: str = "") -> dict[str, int]:
        """Relative key → size of every object under `prefix`."""
        base = self._key(prefix) if prefix.strip("/") else self.prefix
        query = f"{base}/" if base else ""

        def scan() -> dict[str, int]:
            found = {}
            pages = self._conn.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base)
            for page in pages:
                for item in page.get("Contents", []):
                    relative = item["Key"][len(self.prefix):].lstrip("/")
                    if relative and (item["Key"] == base or item["Key"].startswith(query)):
                        found[relative] = item["Size"]
            return found

        return self._conn.call("list", query or "", scan)

    def download_file(self, key: str, path: Path) -> Path:
        """Stream the object under `key` into `path` (written whole or not at all)."""
        full, path = self._key(key), Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)

        def fetch() -> None:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            os.close(fd)
            try:
                self._conn.client.download_file(self.bucket, full, tmp)
                os.replace(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)

        self._conn.call("download", full, fetch)
        return path


def download_uri(uri: str, dest_dir: Path, *, endpoint_url: str | None = None,
                 region: str | None = None, max_attempts: int = 5,
                 backoff_s: float = 0.5) -> list[Path]:
    """Download every object under ``s3://bucket/prefix`` into `dest_dir`; return the paths.

    Keys keep their path below the prefix; a URI that names one object lands as its base name.
    Files already present with the object's size are skipped, so an interrupted download resumes.
    """
    bucket, prefix = parse_s3_uri(uri)
    store = S3Store(bucket, endpoint_url=endpoint_url, region=region,
                    max_attempts=max_attempts, backoff_s=backoff_s)
    objects = store._objects(prefix)
    if not objects:
        raise StorageError(f"no objects under {uri} at {store._conn.where}; check "
                           "dataset.source and storage.endpoint_url")
    dest_dir = Path(dest_dir)
    paths = []
    for key, size in sorted(objects.items()):
        relative = key[len(prefix):].lstrip("/") or key.rsplit("/", 1)[-1]
        path = dest_dir / relative
        if path.is_file() and path.stat().st_size == size:
            log.info("%s is already downloaded; skipped", path)
        else:
            store.download_file(key, path)
        paths.append(path)
    return paths
