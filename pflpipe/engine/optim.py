"""Optimizers over stacked parameters: one update steps every active member.

Each member has its own learning rate. They reproduce torch.optim.SGD (momentum, weight decay)
and torch.optim.Adam step for step; the sequential reference uses torch.optim itself, and the
tests compare the two.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class OptimizerConfig:
    """Local optimizer settings (state is reset at the start of every training call)."""

    name: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    @classmethod
    def from_spec(cls, federation) -> "OptimizerConfig":
        """Read the spec's federation section."""
        return cls(federation.optimizer, federation.momentum, federation.weight_decay)

    def torch_optimizer(self, param_groups: list[dict]) -> torch.optim.Optimizer:
        """The equivalent torch.optim optimizer (for the sequential reference)."""
        if self.name == "adam":
            return torch.optim.Adam(param_groups, betas=self.betas, eps=self.eps,
                                    weight_decay=self.weight_decay, foreach=False)
        return torch.optim.SGD(param_groups, momentum=self.momentum,
                               weight_decay=self.weight_decay, foreach=False)


def _view(lr: Tensor, like: Tensor) -> Tensor:
    return lr.view(-1, *([1] * (like.dim() - 1)))


class StackedOptimizer:
    """Steps the first `k` members of stacked tensors [M, ...] in place.

    Members are ordered so that the active ones always form a prefix and every active member has
    taken the same number of steps, so Adam's bias correction is one scalar per step.
    """

    def __init__(self, config: OptimizerConfig, params: list[Tensor], lrs: list[Tensor]):
        self.config, self.params, self.lrs = config, params, lrs
        self.state: list[dict[str, Tensor]] = [{} for _ in params]

    @torch.no_grad()
    def step(self, k: int, grads: list[Tensor], step_idx: int) -> None:
        """Apply one update to members [0, k) given their gradients [k, ...]."""
        cfg = self.config
        for param, lr, grad, state in zip(self.params, self.lrs, grads, self.state, strict=True):
            p, lr_k = param[:k], _view(lr[:k], grad)
            if cfg.weight_decay:
                grad = grad + cfg.weight_decay * p
            if cfg.name == "adam":
                self._adam(param, p, lr_k, grad, state, step_idx)
                continue
            if cfg.momentum:
                buf = state.setdefault("momentum", torch.zeros_like(param))[:k]
                grad = buf.mul_(cfg.momentum).add_(grad)
            # lr·grad into a buffer kept across steps: the same two roundings as torch's SGD
            # (which the equality tests rely on), without a fresh [k, ...] allocation per step.
            update = state.setdefault("update", torch.empty_like(param))[:k]
            p.sub_(torch.mul(grad, lr_k, out=update))

    def _adam(self, param, p, lr_k, grad, state, step_idx) -> None:
        k = p.shape[0]
        beta1, beta2 = self.config.betas
        exp_avg = state.setdefault("exp_avg", torch.zeros_like(param))[:k]
        exp_avg_sq = state.setdefault("exp_avg_sq", torch.zeros_like(param))[:k]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_idx + 1
        bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
        denom = (exp_avg_sq.sqrt() / math.sqrt(bias2)).add_(self.config.eps)
        p.addcdiv_(exp_avg * (lr_k / bias1), denom, value=-1.0)
