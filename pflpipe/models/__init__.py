"""Build the spec's network and name its head."""

import importlib

import torch
from torch import nn

from pflpipe.errors import SpecError
from pflpipe.models.zoo import Cnn6, CnnCifar, FedAvgCnn, LogisticRegression, Mlp

__all__ = ["build_model", "head_keys", "Cnn6", "CnnCifar", "FedAvgCnn", "LogisticRegression",
           "Mlp"]


def build_model(model_spec, in_shape: tuple[int, ...], n_classes: int, seed: int) -> nn.Module:
    """Build the spec's model with weights initialised from `seed` (global RNG left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _construct(model_spec, tuple(in_shape), n_classes)


def _construct(model_spec, in_shape, n_classes) -> nn.Module:
    arch = model_spec.architecture
    if arch == "mlp":
        return Mlp(in_shape, n_classes, tuple(model_spec.hidden))
    if arch == "logistic":
        return LogisticRegression(in_shape, n_classes)
    if arch == "cnn_cifar":
        return CnnCifar(in_shape, n_classes)
    if arch == "fedavg_cnn":
        return FedAvgCnn(in_shape, n_classes, model_spec.hidden)
    if arch == "cnn6":
        return Cnn6(in_shape, n_classes)
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
