"""Typed errors of the library. The CLI maps each to an exit code and one clear message."""


class PflpipeError(Exception):
    """Base class of every error pflpipe raises on purpose."""


class SpecError(PflpipeError, ValueError):
    """The spec is invalid. ``problems`` holds one formatted line per problem."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class DataError(PflpipeError):
    """The data cannot be loaded or partitioned as the spec asks."""


class DivergenceError(PflpipeError):
    """Training produced a non-finite loss; names the client and the round."""

    def __init__(self, message: str, client: int | None = None, round_idx: int | None = None):
        self.client = client
        self.round_idx = round_idx
        super().__init__(message)

    def __reduce__(self):
        """Keep the client and round when pickled (a sharded stage's worker sends it)."""
        return type(self), (str(self), self.client, self.round_idx)


class WorkerError(PflpipeError):
    """A worker process of a sharded stage died (killed, out of memory, a lost peer)."""


class StorageError(PflpipeError):
    """An object store refused or failed a request (after retries)."""


class TrackingError(PflpipeError):
    """The tracking server or store refused or failed a request, or a value looked like a secret."""


#: The errors that mean the user's input (the spec, a data file) is wrong: the CLI exits 2, and
#: a stage's error event says ``bad_input`` (`pflpipe.events`).
BAD_INPUT = (SpecError, DataError)


def not_utf8(err: UnicodeDecodeError, how: str = "") -> str:
    """Why a text file pflpipe reads (a spec, a results table) is not UTF-8, and the fix."""
    head = bytes(err.object[:4])
    utf16 = head[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in head
    kind = "UTF-16 text" if utf16 else f"not UTF-8 text (byte {err.start + 1} is not)"
    return f"is {kind}; save it as UTF-8{how}"
