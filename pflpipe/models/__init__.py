"""Build the spec's network and name its head."""

import importlib

import torch
from torch import nn

from pflpipe.errors import SpecError
from pflpipe.models.zoo import Cnn6, CnnCifar, FedAvgCnn, LogisticRegression, Mlp

__all__ = ["build_model", "builtin", "head_keys", "Cnn6", "CnnCifar", "FedAvgCnn",
           "LogisticRegression", "Mlp"]


def build_model(model_spec, in_shape: tuple[int, ...], n_classes: int, seed: int) -> nn.Module:
    """Build the spec's model with weights initialised from `seed` (global RNG left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _construct(model_spec, tuple(in_shape), n_classes)


def builtin(model_spec) -> tuple[type[nn.Module], dict] | None:
    """The zoo class of a built-in architecture and its keyword arguments besides the data's.

    None for a custom model (`model.path`).
    """
    arch = model_spec.architecture
    if arch in ("mlp", "fedavg_cnn"):
        hidden = model_spec.hidden
        if arch == "mlp":
            return Mlp, {"hidden": tuple(hidden)}
        return FedAvgCnn, {"hidden": hidden}
    return {"logistic": (LogisticRegression, {}), "cnn_cifar": (CnnCifar, {}),
            "cnn6": (Cnn6, {})}.get(arch)


def _construct(model_spec, in_shape, n_classes) -> nn.Module:
    zoo = builtin(model_spec)
    if zoo is not None:
        cls, kwargs = zoo
        return cls(in_shape, n_classes, **kwargs)
    module_name, class_name = model_spec.path.split(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        raise SpecError(f"model.path: cannot import {model_spec.path!r} ({err})") from err
    model = cls(in_shape=in_shape, n_classes=n_classes, **model_spec.kwargs)
    if not isinstance(model, nn.Module):
        raise SpecError(f"model.path: {model_spec.path!r} built a {type(model).__name__}, "
                        "not a torch.nn.Module")
    return model


def head_keys(model: nn.Module, model_spec) -> frozenset[str]:
    """State-dict keys of the personal head: the spec's prefixes, else the model's own."""
    prefixes = model_spec.head or getattr(model, "head_prefixes", None)
    if not prefixes:
        raise SpecError("model.head: the model declares no head; list its state-dict key "
                        "prefixes, e.g. head: ['fc.']")
    keys = frozenset(k for k in model.state_dict() if k.startswith(tuple(prefixes)))
    if not keys:
        raise SpecError(f"model.head: no state-dict key starts with {list(prefixes)}; keys are "
                        f"{list(model.state_dict())}")
    return keys
