"""PersFL's distillation objectives (thesis eq. 4.2 and 6.1), for one student."""

from torch import Tensor
from torch.nn import functional as F

from pflpipe.engine.trainer import cross_entropy


def soft_loss(student: Tensor, teacher: Tensor, temperature: Tensor, objective: str) -> Tensor:
    """Per-sample soft term at temperature T.

    kl: KL(σ(O/T) ‖ σ(A/T)) = Σ σ(O/T)·(log σ(O/T) − log σ(A/T))   (PersFL, eq. 4.2)
    ce: −Σ σ(O/T)·log σ(A/T)                                      (PersFL-GD, eq. 6.1)
    The two differ by the teacher's entropy, a constant in the student: same gradients.
    """
    log_student = F.log_softmax(student / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher / temperature, dim=-1)
    cross = -(log_teacher.exp() * log_student).sum(-1)
    if objective == "ce":
        return cross
    return cross + (log_teacher.exp() * log_teacher).sum(-1)


def distillation_loss(student: Tensor, teacher: Tensor, labels: Tensor, mask: Tensor,
                      lam: Tensor, temperature: Tensor, objective: str = "kl") -> Tensor:
    """(1 − λ)·CE(y, A(x)) + λ·T²·soft(O(x), A(x); T), averaged over the real samples.

    >>> import torch
    >>> s = torch.tensor([[2.0, 0.0]]); t = torch.tensor([[0.0, 0.0]]); y = torch.tensor([0])
    >>> round(float(distillation_loss(s, t, y, torch.ones(1), torch.tensor(0.0),
    ...                               torch.tensor(1.0))), 4)          # CE = log(1 + e^-2)
    0.1269
    """
    per_sample = distillation_terms(student, teacher, labels, lam, temperature, objective)
    return (per_sample * mask).sum() / mask.sum().clamp_min(1.0)


def distillation_terms(student: Tensor, teacher: Tensor, labels: Tensor, lam: Tensor,
                       temperature: Tensor, objective: str = "kl") -> Tensor:
    """Per-sample (1 − λ)·CE(y, A(x)) + λ·T²·soft(O(x), A(x); T) [B]."""
    hard = cross_entropy(student, labels)
    soft = soft_loss(student, teacher, temperature, objective)
    return (1 - lam) * hard + lam * temperature**2 * soft


def distill_objective(objective: str):
    """The engine objective of one student.

    hp carries its λ ("lam") and T ("temperature"); the batch carries the teacher's logits, computed
    once per client ("teacher_logits").
    """
    def one_student(state, batch, shared, hp, ctx):
        student = ctx.forward(state["model"], batch["x"])
        return ctx.mean(distillation_terms(student, batch["teacher_logits"], batch["y"],
                                           hp["lam"], hp["temperature"], objective), batch)

    return one_student
