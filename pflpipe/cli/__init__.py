"""The ``pflpipe`` command line.

Every verb lives in its own module with ``register(subparsers)``; heavy imports (torch, kfp,
mlflow) happen inside the verb's handler, never here.
"""

import argparse
import importlib
import os
import sys

from pflpipe import __version__
from pflpipe.errors import DataError, DivergenceError, PflpipeError, SpecError, StorageError

VERBS = ("validate", "schema", "split", "report", "personalize_new", "run", "compile", "submit")

#: Exit codes: 0 ok, 1 the run failed, 2 bad spec, arguments or input file.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(PflpipeError):
    """A bad argument or input file given on the command line (exit code 2)."""


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
        importlib.import_module(f"pflpipe.cli.{verb}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("PFLPIPE_DEBUG") == "1"
    try:
        return args.handler(args) or EXIT_OK
    except (SpecError, DataError, UsageError) as err:
        if debug:
            raise
        _error(err, prefix="" if isinstance(err, SpecError) else "error: ")
        return EXIT_USAGE
    except (DivergenceError, StorageError, PflpipeError) as err:
        if debug:
            raise
        _error(err, prefix="error: ")
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; finished rounds and stages are kept on disk", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - last resort: one line, the traceback with --debug
        if debug:
            raise
        _error(err, prefix=f"error: unexpected {err.__class__.__name__}: ")
        print("(run again with --debug for the traceback)", file=sys.stderr)
        return EXIT_FAILED


def _error(err: Exception, prefix: str) -> None:
    print(f"{prefix}{err}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
