"""pflpipe: declarative, Kubeflow-native personalized federated learning experiments.

From Python: ``pflpipe.run(spec, **overrides)``, ``pflpipe.load_spec(spec, **overrides)`` and
``pflpipe.compile(spec, output)`` (see `pflpipe.api`; imported on first use).
"""

from pflpipe.version import __version__

__all__ = ["RunResult", "__version__", "compile", "load_spec", "run"]
_API = ("RunResult", "compile", "load_spec", "run")


def __getattr__(name: str):
    if name in _API:
        from pflpipe import api

        return getattr(api, name)
    raise AttributeError(f"module 'pflpipe' has no attribute {name!r}")
