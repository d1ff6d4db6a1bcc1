"""PersFL: per-client optimal teachers (stage 1) and λ/T grid-search distillation (stage 2).

The names below are imported when first used (PEP 562), so ``pflpipe.distill.teachers`` and
``pflpipe.distill.lambda_t_figure`` load without torch (select_teachers imports neither torch nor
the engine: docs/performance.md, start-up).
"""

import importlib

_WHERE = {"GridConfig": "grid", "GridResult": "grid", "chosen_history": "grid",
          "chosen_histories": "grid", "run_grid": "grid", "run_grids": "grid",
          "teacher_logits": "grid", "distillation_loss": "objective",
          "soft_loss": "objective", "choose_rounds": "teachers"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
