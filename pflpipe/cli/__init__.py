"""The ``pflpipe`` command line.

Every verb lives in its own module with ``register(subparsers)``; heavy imports (torch, kfp,
mlflow) happen inside the verb's handler, never here.
"""

import argparse
import errno
import importlib
import logging
import os
import sys
import traceback

from pflpipe.errors import DataError, PflpipeError, SpecError
from pflpipe.version import __version__

VERBS = ("validate", "schema", "split", "report", "personalize_new", "run", "compile", "submit")

#: Exit codes: 0 ok, 1 the run failed, 2 bad spec, arguments or input file.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(PflpipeError):
    """A bad argument or input file given on the command line (exit code 2)."""


def seed_argument(text: str) -> int:
    """Parse a --seed value: an integer in the spec's seed range (0..2³² − 1)."""
    from pflpipe.spec.sections import MAX_SEED

    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in 0..{MAX_SEED} (got {seed})")
    return seed


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every verb registered."""
    parser = argparse.ArgumentParser(
        prog="pflpipe",
        description="Declarative, Kubeflow-native personalized federated learning experiments.",
    )
    parser.add_argument("--version", action="version", version=f"pflpipe {__version__}")
    parser.add_argument("--debug", action="store_true", help="Show tracebacks of errors.")
    subparsers = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        importlib.import_module(f"pflpipe.cli.{verb}_verb").register(subparsers)
    for sub in subparsers.choices.values():  # `pflpipe VERB ... --debug` too
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="Show tracebacks of errors.")
    return parser


#: The shell's code for a writer killed by SIGPIPE (128 + 13), as `yes | head` gives.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (the same with --debug, which adds tracebacks)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("PFLPIPE_DEBUG") == "1"
    # A log record that cannot be written (a full disk) must not print "--- Logging error ---"
    # and a traceback; the failure itself reaches the user as one line.
    logging.raiseExceptions = debug
    from pflpipe.events import addressed_to

    try:
        with addressed_to("person"):  # a verb's stages print their events as text
            return args.handler(args) or EXIT_OK
    except KeyboardInterrupt:
        print("interrupted; finished rounds and stages are kept on disk", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`pflpipe validate SPEC | head`): stop quietly
        # Python's recipe: point stdout at devnull so its flush at exit cannot raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as err:  # noqa: BLE001 - every error becomes a message and an exit code
        if debug:
            traceback.print_exc()
        return _report(err, debug)


#: File errors that come from a path the user gave (exit 2); other OSErrors (a full disk) exit 1.
_PATH_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                NotADirectoryError)


def _report(err: Exception, debug: bool) -> int:
    """Print one clear message for `err`; return its exit code."""
    if isinstance(err, SpecError | DataError | UsageError) or getattr(err, "bad_input", False):
        _error(err, prefix="" if isinstance(err, SpecError) else "error: ")
        return EXIT_USAGE
    if isinstance(err, PflpipeError):  # DivergenceError, StorageError, TrackingError, a stage
        _error(err, prefix="error: ")
        return EXIT_FAILED
    if isinstance(err, OSError) and err.filename is None and err.errno in (errno.ENOSPC,
                                                                           errno.EDQUOT):
        import tempfile

        print(f"error: {err.strerror or err} (the writer named no file: check the results "
              f"directory, {os.getcwd()} and {tempfile.gettempdir()}); free some space and run "
              "the same command again", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(err, OSError) and err.filename is not None:
        where = err.filename if err.filename2 is None else f"{err.filename} → {err.filename2}"
        print(f"error: {where}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USAGE if isinstance(err, _PATH_ERRORS) else EXIT_FAILED
    _error(err, prefix=f"error: unexpected {err.__class__.__name__}: ")
    print("This is a bug in pflpipe; please report it" + (
        " with the traceback above." if debug else
        ", with the output of the same command run with --debug (it shows the traceback)."),
        file=sys.stderr)
    return EXIT_FAILED


def _error(err: Exception, prefix: str) -> None:
    print(f"{prefix}{err}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
