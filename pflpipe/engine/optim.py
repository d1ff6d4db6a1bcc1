"""Optimizers over stacked parameters: one update steps every active member.

Each member has its own learning rate. They reproduce torch.optim.SGD (momentum, weight decay)
and torch.optim.Adam step for step; the sequential reference uses torch.optim itself, and the
tests compare the two.
"""

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
    taken the same number of steps, so Adam's bias correction is one scalar per step. The state
    buffers exist from the start (a compiled step sees the same tensors on every call).
    """

    def __init__(self, config: OptimizerConfig, params: list[Tensor], lrs: list[Tensor]):
        self.config, self.params, self.lrs = config, params, lrs
        names = (("exp_avg", "exp_avg_sq") if config.name == "adam"
                 else ("update",) + (("momentum",) if config.momentum else ()))
        self.state: list[dict[str, Tensor]] = [
            {name: (torch.empty_like if name == "update" else torch.zeros_like)(param)
             for name in names} for param in params]

    @torch.no_grad()
    def step(self, k: int, grads: list[Tensor], step_idx: "int | Tensor") -> None:
        """Apply one update to members [0, k) given their gradients [k, ...]."""
        update(self.config, self.params, self.lrs, self.state, grads, k, step_idx)


def update(cfg: OptimizerConfig, params: list[Tensor], lrs: list[Tensor],
           states: list[dict[str, Tensor]], grads: list[Tensor], k: int,
           step_idx: "int | Tensor") -> None:
    """One update of members [0, k) of `params`, in place (the step of StackedOptimizer).

    `step_idx` (the number of steps taken before) may be a 0-d tensor, so that a compiled step
    does not specialise on it.
    """
    for param, lr, grad, state in zip(params, lrs, grads, states, strict=True):
        p, lr_k = param[:k], _view(lr[:k], grad)
        if cfg.weight_decay:
            grad = grad + cfg.weight_decay * p
        if cfg.name == "adam":
            _adam(cfg, p, lr_k, grad, state, step_idx)
            continue
        if cfg.momentum:
            grad = state["momentum"][:k].mul_(cfg.momentum).add_(grad)
        if torch.compiler.is_compiling():   # the compiler fuses lr·grad into the update
            p.sub_(grad * lr_k)
        else:  # lr·grad into a buffer kept across steps: the same two roundings as torch's SGD
            # (which the equality tests rely on), without a fresh [k, ...] allocation per step.
            p.sub_(torch.mul(grad, lr_k, out=state["update"][:k]))


def _adam(cfg: OptimizerConfig, p, lr_k, grad, state, step_idx) -> None:
    k = p.shape[0]
    beta1, beta2 = cfg.betas
    exp_avg, exp_avg_sq = state["exp_avg"][:k], state["exp_avg_sq"][:k]
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = step_idx + 1
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    denom = (exp_avg_sq.sqrt() / bias2 ** 0.5).add_(cfg.eps)
    p.addcdiv_(exp_avg * (lr_k / bias1), denom, value=-1.0)


@dataclass(frozen=True)
class ServerOptimizerConfig:
    """How the server moves the global model towards the round's aggregate.

    Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Algorithm 2: the aggregate's
    change Δ = aggregate − x (the negative pseudo-gradient) is applied as
    ``fedavg``: x + η·Δ (η = 1: the aggregate itself), or with m = β₁·m + (1 − β₁)·Δ and
    ``fedadam``: v = β₂·v + (1 − β₂)·Δ², ``fedyogi``: v = v − (1 − β₂)·Δ²·sign(v − Δ²),
    x + η·m / (√v + τ); m starts at 0 and v at τ², without bias correction (as in the paper).
    """

    name: str = "fedavg"
    lr: float = 1.0
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3

    @property
    def is_identity(self) -> bool:
        """Whether it leaves the aggregate as it is (fedavg with η = 1)."""
        return self.name == "fedavg" and self.lr == 1.0

    @classmethod
    def from_spec(cls, section) -> "ServerOptimizerConfig":
        """Read the spec's `federation.server_optimizer` section."""
        return cls(section.name, section.server_lr, section.beta1, section.beta2, section.tau)


#: The server-state groups that hold an adaptive server optimizer's moments m and v: the server's
#: own (`pflpipe.engine.protocol.PRIVATE`), never sent to the clients.
MOMENTS = ("_server_optimizer.m", "_server_optimizer.v")


def server_update(config: ServerOptimizerConfig, current: dict[str, Tensor],
                  aggregate: dict[str, Tensor], server: dict[str, dict[str, Tensor]]
                  ) -> tuple[dict[str, Tensor], dict[str, dict[str, Tensor]]]:
    """New values of the aggregated keys, and the server state with the moments (`MOMENTS`).

    FedAvg's default server rule (`pflpipe.algorithms.algorithm.Algorithm.server_step`) ends with
    it. Only floating-point keys move by the rule; others (a batch counter) take the aggregate.

    >>> config = ServerOptimizerConfig("fedadam", lr=0.1, beta1=0.5, beta2=0.5, tau=0.5)
    >>> new, server = server_update(config, {"w": torch.tensor([1.0])},
    ...                             {"w": torch.tensor([2.0])}, {})
    >>> m, v = (server[group]["w"].item() for group in MOMENTS)
    >>> new["w"].item(), m, v  # 1 + 0.1·0.5/(√0.625+0.5)
    (1.0387..., 0.5, 0.625)
    """
    if config.is_identity:
        return aggregate, server
    moments = [dict(server.get(group, {})) for group in MOMENTS]
    out = {}
    for key, value in aggregate.items():
        x = current[key]
        if not value.is_floating_point():
            out[key] = value
            continue
        delta = value - x
        if config.name == "fedavg":
            out[key] = x + config.lr * delta
            continue
        m = moments[0].get(key, torch.zeros_like(x))
        v = moments[1].get(key, torch.full_like(x, config.tau ** 2))
        m = config.beta1 * m + (1 - config.beta1) * delta
        square = delta * delta
        if config.name == "fedyogi":
            v = v - (1 - config.beta2) * square * torch.sign(v - square)
        else:
            v = config.beta2 * v + (1 - config.beta2) * square
        moments[0][key], moments[1][key] = m, v
        out[key] = x + config.lr * m / (v.sqrt() + config.tau)
    if config.name == "fedavg":
        return out, server
    return out, {**server, **dict(zip(MOMENTS, moments, strict=True))}
