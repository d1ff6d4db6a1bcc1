"""A Store on an S3-compatible object store (AWS S3, MinIO, Ceph), through boto3.

Credentials come only from boto3's default chain: the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; on a cluster mounted from the Kubernetes secret named in
``storage.secret_name``), a shared credentials file or an instance role. The spec never holds them.

Transient failures (connection refused or reset, timeouts, HTTP 5xx, throttling) are retried by
botocore's own "standard" retry mode (exponential backoff with jitter, at most ``max_attempts``
attempts in all); every request has a connect and a read timeout, so a store that accepts
connections and never answers fails in ``max_attempts × (read_timeout + backoff)`` at most, and
`check_reachable` (one attempt, `PROBE_TIMEOUT_S`) lets a command find that out before it computes
anything. Every failure becomes a StorageError that names the endpoint, the bucket and, where
there is one, the key.
"""

import logging
import os
import tempfile
import threading
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
#: What a web server that is not S3 (a console, a proxy's page) answers to an S3 request.
_NOT_S3_CODES = {"501", "NotImplemented", "405"}
#: Seconds the reachability probe waits for a connection and for an answer (one attempt).
PROBE_TIMEOUT_S = 5.0
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
                 max_attempts: int, connect_timeout: float, read_timeout: float):
        import boto3

        self.bucket, self.endpoint_url, self.max_attempts = bucket, endpoint_url, max_attempts
        self._session = boto3.session.Session()
        self.client = self._new_client(max_attempts, connect_timeout, read_timeout, region)
        self._bucket_checked = False
        self._lock = threading.Lock()

    def _new_client(self, attempts: int, connect_timeout: float, read_timeout: float,
                    region: str | None):
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": attempts, "mode": "standard"},
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            region_name=region, signature_version="s3v4",
            # MinIO and Ceph serve buckets by path, not by virtual host.
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
        )
        return self._session.client("s3", endpoint_url=self.endpoint_url, config=config)

    @property
    def where(self) -> str:
        """The endpoint, for messages."""
        return self.endpoint_url or f"the AWS endpoint of region {self.client.meta.region_name}"

    def call(self, operation: str, key: str | None, fn: Callable[[], T]) -> T:
        """Run one request (botocore retries transient errors); map failures to StorageError."""
        import botocore.exceptions as bex

        if not self._bucket_checked and operation != "access check":
            self.check_bucket()
        target = f"s3://{self.bucket}/{key}" if key is not None else f"bucket {self.bucket!r}"
        try:
            return fn()
        except bex.NoCredentialsError as err:
            raise StorageError(f"{NO_CREDENTIALS}; needed for {operation} of {target} at "
                               f"{self.where}") from err
        except (bex.ConnectionError, bex.HTTPClientError) as err:
            raise self._gave_up(operation, target, self.max_attempts, err) from err
        except bex.ClientError as err:
            code = _code(err)
            attempts = err.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
            if attempts > 1:  # botocore found it transient (5xx, throttling) and retried
                raise self._gave_up(operation, target, attempts, err) from err
            raise self._client_error(operation, key, target, code, err) from err

    def _gave_up(self, operation: str, target: str, attempts: int, err: Exception
                 ) -> StorageError:
        return StorageError(
            f"S3 {operation} of {target} at {self.where} failed after {attempts} attempts: "
            f"{err}. Check that the endpoint is reachable; objects written before are untouched, "
            "and the same call can be repeated once it is back")

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
        if code in _NOT_S3_CODES:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", code)
            return StorageError(
                f"the endpoint {self.where} is not an S3 server: it answered HTTP {status} "
                f"({code}) to S3's {err.operation_name} during {operation} of {target}; point "
                "storage.endpoint_url at the S3 API (MinIO's is on port 9000, its console on "
                "9001)")
        return StorageError(f"S3 {operation} of {target} at {self.where} failed: {code}: {err}")

    def probe(self) -> None:
        """Raise StorageError unless the endpoint answers one request within `PROBE_TIMEOUT_S`.

        One attempt, short timeouts: a store that is down or accepts connections without ever
        answering is reported in seconds, before anything is computed. A missing bucket or
        absent credentials are reported as by any request; a refusal (a policy scoped to a
        prefix) counts as an answer.
        """
        import botocore.exceptions as bex

        client = self._new_client(1, PROBE_TIMEOUT_S, PROBE_TIMEOUT_S,
                                  self.client.meta.region_name)
        try:
            self.call("access check", None, lambda: client.head_bucket(Bucket=self.bucket))
        except AccessDenied:
            pass
        except StorageError as err:
            cause = err.__cause__
            if isinstance(cause, bex.ReadTimeoutError | bex.ConnectTimeoutError):
                raise StorageError(
                    f"the S3 endpoint {self.where} does not answer (no answer within "
                    f"{PROBE_TIMEOUT_S:g} s to a request for bucket {self.bucket!r}); start it "
                    "or fix storage.endpoint_url") from None
            if isinstance(cause, bex.EndpointConnectionError):
                raise StorageError(f"the S3 endpoint {self.where} cannot be reached ({cause}); "
                                   "start it or fix storage.endpoint_url") from None
            raise
        self._bucket_checked = True

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
                 region: str | None = None, max_attempts: int = 5,
                 connect_timeout: float = 5.0, read_timeout: float = 30.0,
                 _connection: _Connection | None = None):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be 1 or more (got {max_attempts})")
        self._conn = _connection or _Connection(bucket, endpoint_url, region, max_attempts,
                                                connect_timeout, read_timeout)
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

    def check_reachable(self) -> None:
        """Fail in seconds (StorageError) when the store does not answer (`_Connection.probe`)."""
        self._conn.probe()

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
                 region: str | None = None, max_attempts: int = 5) -> list[Path]:
    """Download every object under ``s3://bucket/prefix`` into `dest_dir`; return the paths.

    Keys keep their path below the prefix; a URI that names one object lands as its base name.
    Files already present with the object's size are skipped, so an interrupted download resumes.
    """
    bucket, prefix = parse_s3_uri(uri)
    store = S3Store(bucket, endpoint_url=endpoint_url, region=region,
                    max_attempts=max_attempts)
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
