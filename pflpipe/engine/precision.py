"""`engine.precision`: the arithmetic of the forward passes and of matrix products.

- ``fp32``: IEEE float32 throughout (matrix products and convolutions included, also on CUDA,
  where cuDNN would otherwise use TF32 for convolutions).
- ``tf32``: float32 tensors, with CUDA matrix products and convolutions in TensorFloat-32
  (10-bit mantissa) on Ampere or newer GPUs; on a CPU the same as ``fp32``.
- ``bf16``: mixed precision. Every forward pass (training and scoring) runs in bfloat16 — the
  model's floating parameters and inputs are cast to bfloat16 on the way in, its output back to
  float32 — while parameters, gradients, optimizer state and losses stay float32 (the cast's
  gradient is the float32 one). This is what ``torch.autocast`` does to a network of linear and
  convolution layers, written out because autocast does not reach into ``torch.func.vmap`` (a
  vmapped ``F.linear`` under autocast stays float32). It runs on CPUs (fast where they have AMX
  or AVX-512 BF16) and on CUDA GPUs.
"""

from typing import Literal

import torch
from torch import Tensor

Precision = Literal["fp32", "tf32", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16")


def use(precision: str) -> None:
    """Set this process's CUDA matrix-product and convolution arithmetic for `precision`."""
    tf32 = precision == "tf32"
    # the new API for cuBLAS; cuDNN's flag is the one inductor's convolutions read
    torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    torch.backends.cudnn.allow_tf32 = tf32


def compute_dtype(precision: str) -> torch.dtype | None:
    """The dtype forward passes run in (None: the tensors' own)."""
    return torch.bfloat16 if precision == "bf16" else None


def cast(tree: "dict[str, Tensor] | Tensor", dtype: torch.dtype | None):
    """`tree`'s floating tensors in `dtype` (unchanged when `dtype` is None)."""
    if dtype is None:
        return tree
    if isinstance(tree, Tensor):
        return tree.to(dtype) if tree.is_floating_point() else tree
    return {k: cast(v, dtype) for k, v in tree.items()}
