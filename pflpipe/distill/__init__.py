"""PersFL: per-client optimal teachers (stage 1) and λ/T grid-search distillation (stage 2)."""

from pflpipe.distill.grid import (
    GridConfig,
    GridResult,
    chosen_history,
    run_grid,
    teacher_logits,
)
from pflpipe.distill.objective import distillation_loss, soft_loss
from pflpipe.distill.teachers import choose_rounds

__all__ = ["GridConfig", "GridResult", "choose_rounds", "chosen_history", "distillation_loss",
           "run_grid", "soft_loss", "teacher_logits"]
