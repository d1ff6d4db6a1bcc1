"""Random numbers that depend only on a member's key, so batched and sequential runs draw alike.

The engine gives every member a 63-bit *key* per step (from the member's seed, as its batch order
is) and per evaluation. `normal` turns a key into standard normal noise with integer hashing and
the Box–Muller transform: plain tensor arithmetic, so it works under ``vmap`` (each member its own
key), on any device, and never touches torch's global RNG — a resumed run draws exactly what an
uninterrupted one drew.
"""

import math

import numpy as np
import torch
from torch import Tensor

_M32 = 0xFFFFFFFF


def step_keys(seeds: list[int], steps: int) -> Tensor:
    """Keys [M, steps] (int64) of every member's steps: splitmix64 of (seed, step)."""
    with np.errstate(over="ignore"):
        z = (np.asarray(seeds, dtype=np.uint64)[:, None]
             + (np.arange(steps, dtype=np.uint64)[None, :] + np.uint64(1))
             * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return torch.from_numpy((z >> np.uint64(1)).astype(np.int64))


def _mix32(x: Tensor) -> Tensor:
    """Chris Wellons' lowbias32 hash of 32-bit values held in int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def normal(key: Tensor, shape: tuple[int, ...], salt: int = 0,
           dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normal noise of `shape` determined by `key` (a 0-d int64 tensor) and `salt`.

    Draws that must differ within one step (two sampled tensors) use different salts.

    >>> a = normal(torch.tensor(7), (2, 3))
    >>> bool(torch.equal(a, normal(torch.tensor(7), (2, 3)))), a.shape
    (True, torch.Size([2, 3]))
    >>> bool(torch.equal(a, normal(torch.tensor(7), (2, 3), salt=1)))
    False
    """
    index = torch.arange(math.prod(shape), device=key.device, dtype=torch.int64)
    base = _mix32(_mix32((key & _M32) ^ _mix32(((key >> 32) & _M32) + salt)) ^ 0x5BD1E995)
    u1 = (_mix32(base ^ _mix32(2 * index)).double() + 0.5) / 2.0 ** 32
    u2 = (_mix32(base ^ _mix32(2 * index + 1)).double() + 0.5) / 2.0 ** 32
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    return z.to(dtype).reshape(shape)
