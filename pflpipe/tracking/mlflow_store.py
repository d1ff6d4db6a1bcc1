"""Opening an MLflow store: its probes, the credentials of its URI and the one retry policy.

Every process opens a store through `_client`, which probes it first (`check_server`,
`check_sqlite`: a silent server or a locked database fails in seconds) and sets MLflow's retry
variables (`HTTP_POLICY`); every call goes through `_guarded`, which turns a failure into one
TrackingError line naming the store. mlflow is imported inside functions only.
"""

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pflpipe.errors import DataError, TrackingError
from pflpipe.tracking.scrub import scrub_text

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The one retry policy of MLflow calls, MLflow's own; pflpipe has no retry loop of its own.
#: - On a tracking server, MLflow's REST client retries (urllib3) a refused connection, a timeout
#:   and HTTP 429/5xx; these defaults of its environment variables (the user's values win) bound
#:   a call to (MAX_RETRIES + 1) × TIMEOUT plus a few seconds of backoff (1, 2 s), about a minute,
#:   instead of MLflow's 7 retries × 120 s. The first request of a process is `check_server`'s,
#:   which gives up after PROBE_TIMEOUT_S.
#: - On a sqlite store, a call waits for a lock held by another process by sqlite's own busy
#:   timeout (MLflow sets 20 s per session), then fails; the first open of a process is
#:   `check_sqlite`'s, which gives up after PROBE_TIMEOUT_S.
#: Every failure then becomes one TrackingError naming the store.
HTTP_POLICY = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "20", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
#: Seconds of MLflow's sqlite busy timeout (`mlflow.store.db.utils`), for messages.
SQLITE_BUSY_S = 20


_READY: set[str] = set()  # stores this process has opened: sqlite schema made, server answered
#: Seconds a tracking server has to answer its first request; MLflow's own retries would wait
#: minutes on a server that is down.
PROBE_TIMEOUT_S = 5.0


def split_credentials(tracking_uri: str) -> tuple[str, str | None, str | None]:
    """Split ``user:password@`` off an http(s) URI: ``(uri without them, user, password)``.

    >>> split_credentials("http://alice:p%40ss@127.0.0.1:5000/")
    ('http://127.0.0.1:5000/', 'alice', 'p@ss')
    >>> split_credentials("sqlite:///mlflow.db")
    ('sqlite:///mlflow.db', None, None)
    """
    import urllib.parse

    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return tracking_uri, None, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return (urllib.parse.urlunsplit(parts._replace(netloc=host)), urllib.parse.unquote(user),
            urllib.parse.unquote(password) if colon else None)


def move_credentials(tracking_uri: str) -> str:
    """Return `tracking_uri` without ``user:password@``, which go to MLflow's own variables.

    MLflow sends MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD as HTTP basic auth; a URI
    that carries them would hand the userinfo to the HTTP client as part of the host, and would
    show them wherever the URI is printed (the pipeline's parameters). Child processes inherit
    the variables.
    """
    import os

    uri, user, password = split_credentials(tracking_uri)
    if user is not None:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return uri


def check_server(tracking_uri: str) -> None:
    """Raise TrackingError when nothing answers HTTP at `tracking_uri` within `PROBE_TIMEOUT_S`.

    Any HTTP answer (even 401 or 404) and a TLS failure (MLflow has settings for certificates)
    count as alive; a refused or unanswered connection and an unknown host do not. The request
    carries MLflow's basic-auth credentials when they are set.
    """
    import base64
    import os
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(tracking_uri.rstrip("/") + "/health")
    if user := os.environ.get("MLFLOW_TRACKING_USERNAME"):
        token = f"{user}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, ssl.SSLError) and _plain_http(reason):
            raise TrackingError(
                f"the MLflow tracking server at {scrub_text(tracking_uri)} answers plain HTTP, "
                f"not HTTPS (the TLS handshake failed: {reason.reason or reason}); write "
                f"{scrub_text(tracking_uri).replace('https://', 'http://', 1)} in tracking.uri "
                "(or MLFLOW_TRACKING_URI), or serve it behind TLS") from None
        if isinstance(reason, ssl.SSLError):
            return
        if isinstance(reason, TimeoutError):
            reason = f"no answer within {PROBE_TIMEOUT_S:g} s"
        raise TrackingError(
            f"the MLflow tracking server at {scrub_text(tracking_uri)} does not answer "
            f"({reason}); start it, point tracking.uri (or MLFLOW_TRACKING_URI) at a running "
            "server, or set tracking.enabled: false") from None


def _plain_http(err) -> bool:
    """Whether a TLS error is what a plain-HTTP server's reply to a TLS hello causes."""
    text = f"{getattr(err, 'reason', '')} {err}".upper()
    return any(sign in text for sign in ("WRONG_VERSION_NUMBER", "RECORD LAYER FAILURE",
                                         "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST",
                                         "UNKNOWN_PROTOCOL"))


def check_sqlite(tracking_uri: str) -> None:
    """Raise TrackingError when another process holds the sqlite store's write lock.

    Waits `PROBE_TIMEOUT_S` for it (``BEGIN IMMEDIATE``, rolled back at once); a database not
    made yet passes (MLflow creates it). A path that is a directory, or a file that is not an
    sqlite database, is a DataError (the spec's tracking.uri is wrong).
    """
    import os
    import sqlite3

    database = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    if database.is_dir():
        raise DataError(f"tracking.uri {tracking_uri}: {database} is a directory; name the "
                        f"database file, e.g. sqlite:///{database / 'mlflow.db'}")
    if not database.is_file():
        return
    try:
        connection = sqlite3.connect(database, timeout=PROBE_TIMEOUT_S, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except sqlite3.OperationalError as err:
        if not os.access(database.parent, os.W_OK) or "readonly" in str(err):
            raise TrackingError(
                f"the MLflow store {tracking_uri} cannot be written: its folder "
                f"{database.parent} is read-only ({err}; sqlite writes a journal beside the "
                "database); make the folder writable, or set tracking.uri to a store in a "
                "writable folder") from None
        if "locked" not in str(err) and "busy" not in str(err):
            raise TrackingError(f"the MLflow store {tracking_uri} cannot be opened ({err})"
                                ) from None
        raise TrackingError(_locked(tracking_uri, PROBE_TIMEOUT_S)) from None
    except sqlite3.DatabaseError as err:  # a text file, an image: anything but sqlite
        raise DataError(f"tracking.uri {tracking_uri}: {database} is not an sqlite database "
                        f"({err}); name a new file (MLflow creates it) or an MLflow store, "
                        f"e.g. sqlite:///{database.with_name('mlflow.db')}") from None


def _locked(tracking_uri: str, seconds: float) -> str:
    return (f"the MLflow store {tracking_uri} is locked by another process (waited "
            f"{seconds:g} s); end the process that holds it (an open `sqlite3` shell, a stuck "
            "`mlflow ui` or run) or set tracking.uri to another store")


def _client(tracking_uri: str):
    """Return a client; the first one of a process on a sqlite store holds a lock beside it.

    MLflow creates and migrates a sqlite schema when a client first opens the database; two
    processes doing that at once fail ("duplicate column name: step"). The lock makes them take
    turns: the first creates the tables, the others find them. The first client of a process
    on a store probes it (`check_server`, `check_sqlite`) and sets `HTTP_POLICY`.
    """
    import os

    from mlflow import MlflowClient

    # MLflow prints (and fetches) a "View run" link at the end of every run on a server; we
    # end hundreds of client runs and print one link of our own.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name, value in HTTP_POLICY.items():
        os.environ.setdefault(name, value)
    # The store logs each SQLAlchemy error with its traceback before raising it; the raise
    # becomes one TrackingError line (`_guarded`).
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    tracking_uri = move_credentials(tracking_uri)
    if tracking_uri.startswith(("http://", "https://")) and tracking_uri not in _READY:
        check_server(tracking_uri)
        _READY.add(tracking_uri)
    if not tracking_uri.startswith("sqlite:///") or tracking_uri in _READY:
        return MlflowClient(tracking_uri=tracking_uri)
    from filelock import FileLock

    check_sqlite(tracking_uri)
    _sqlite_write_ahead_log()
    database = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    with FileLock(f"{database}.lock"):
        client = MlflowClient(tracking_uri=tracking_uri)
    _READY.add(tracking_uri)
    return client


def _sqlite_write_ahead_log() -> None:
    """Open every sqlite connection of this process in WAL mode with synchronous=NORMAL.

    MLflow's store commits after every call (a run, a batch of metrics, a logged model), and in
    sqlite's default mode each commit waits for the disk twice; with a write-ahead log a commit
    only appends to it, and readers (``mlflow ui``) no longer block the writer. WAL is recorded
    in the database file, so every later client finds it. NORMAL still keeps the database
    consistent on a crash; what a power cut can lose is the last commits before it.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _write_ahead_log):
        event.listen(Engine, "connect", _write_ahead_log)


def _write_ahead_log(connection, _record) -> None:
    import sqlite3

    if not isinstance(connection, sqlite3.Connection):
        return
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:  # another process holds the database: keep its mode
        log.debug("sqlite journal mode left as it is", exc_info=True)
    connection.execute("PRAGMA synchronous=NORMAL")


def _guarded(what: str, tracking_uri: str, fn: Callable[..., T], *args, **kwargs) -> T:
    """Call `fn` (MLflow retries by `HTTP_POLICY`); turn its failure into one TrackingError line."""
    from mlflow.exceptions import MlflowException

    try:
        return fn(*args, **kwargs)
    except MlflowException as err:
        if "database is locked" in str(err):
            raise TrackingError(_locked(tracking_uri, SQLITE_BUSY_S)) from err
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "Max retries exceeded" in first:
            first = _no_answer()
        elif "Read timed out" in first:
            first = _stalled()
        raise TrackingError(f"MLflow {what} at {scrub_text(tracking_uri)} failed: "
                            f"{scrub_text(first)}") from err
    except OSError as err:   # requests' errors (a read timeout) MLflow lets through
        first = _stalled() if "timed out" in str(err) else str(err).splitlines()[0]
        raise TrackingError(f"MLflow {what} at {scrub_text(tracking_uri)} failed: "
                            f"{scrub_text(first)}") from err


def _stalled() -> str:
    """Why a server call failed when the server began a reply and stopped."""
    import os

    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", 120)
    return (f"the server accepted the request but sent no complete reply within {timeout} s "
            "(MLFLOW_HTTP_REQUEST_TIMEOUT); it is overloaded or stuck: check its logs and "
            "restart it, or set tracking.enabled: false")


def _no_answer() -> str:
    """Why a server call failed after MLflow's retries, in `HTTP_POLICY`'s terms."""
    import os

    tries = 1 + int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", 7))
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", 120)
    return (f"the server did not answer in {tries} tries of {timeout} s each "
            "(MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT); check that it is "
            "up, or set tracking.enabled: false")
