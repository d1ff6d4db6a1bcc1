"""What `pflpipe validate` can tell about the spec's model without any data.

A custom model path must name an ``nn.Module`` subclass, and the clients' copies of the model
must fit in memory.

The model is built on torch's ``meta`` device (shapes only, no memory, no weights), so a model of
any size is counted in milliseconds.
"""

import importlib
import os

from pflpipe.errors import SpecError

#: Copies of the parameters the engine holds per client (the parameters, their gradients and
#: up to two optimizer moments) plus the global model: a lower bound on what a stage allocates.
COPIES_PER_CLIENT = 4


def check_model(spec, shape: tuple[int, ...] | None = None, n_classes: int | None = None,
                clients: int | None = None) -> None:
    """Raise SpecError naming the field when the spec's model cannot be built or cannot fit.

    `validate` knows the input shape and classes of the named datasets only; a stage passes its
    data's `shape`, `n_classes` and its `clients` (split among engine.workers processes).
    """
    model_spec = spec.model
    if model_spec.architecture == "custom":
        resolve_custom(model_spec.path)
    known_shape, known_classes = _input_of(spec)
    shape, n_classes = shape or known_shape, n_classes or known_classes
    if shape is None or n_classes is None:
        return
    parameters = count_parameters(model_spec, shape, n_classes)
    clients = clients or spec.partition.n_clients or 1
    clients = -(-clients // max(1, spec.engine.workers))  # each worker process holds a shard
    needed = parameters * 4 * (COPIES_PER_CLIENT * clients + 1)
    memory = physical_memory()
    if memory and needed > memory:
        field = {"mlp": "model.hidden", "fedavg_cnn": "model.hidden",
                 "custom": "model.kwargs"}.get(model_spec.architecture, "model.architecture")
        raise SpecError(
            f"{field}: the model has {parameters:,} parameters; {clients:,} clients' copies "
            f"(parameters, gradients, optimizer state) need at least {needed / 2**30:,.1f} GiB, "
            f"more than this machine's {memory / 2**30:,.1f} GiB of memory. Use a smaller model, "
            "fewer clients (partition.n_clients) or more workers (engine.workers)")


def resolve_custom(path: str) -> type:
    """Import ``package.module:ClassName``; raise SpecError unless it is an nn.Module subclass."""
    from torch import nn

    module_name, class_name = path.split(":")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except ImportError as err:
        raise SpecError(f"model.path: cannot import module {module_name!r} ({err}); is it "
                        "installed, or on PYTHONPATH?") from None
    except AttributeError:
        raise SpecError(f"model.path: module {module_name!r} has no {class_name!r}") from None
    except Exception as err:  # noqa: BLE001 - the user's module failed while importing
        raise SpecError(f"model.path: importing {module_name!r} failed "
                        f"({err.__class__.__name__}: {err})") from None
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        what = f"the class {found.__name__}" if isinstance(found, type) else \
            f"a {type(found).__name__}"
        raise SpecError(f"model.path: {path!r} is {what}, not a subclass of torch.nn.Module")
    return found


def count_parameters(model_spec, shape: tuple[int, ...], n_classes: int) -> int:
    """The model's parameter count, built on the meta device (no memory allocated)."""
    import torch

    from pflpipe.models import _construct

    try:
        with torch.device("meta"):
            model = _construct(model_spec, tuple(shape), n_classes)
    except SpecError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's constructor refused its arguments
        if model_spec.architecture == "custom" and _accepts(model_spec, shape, n_classes):
            raise SpecError(f"model.path: the constructor of {model_spec.path!r} raised "
                            f"{err.__class__.__name__}: {err}{_where(err)} when built for inputs "
                            f"{tuple(shape)} and {n_classes} classes with model.kwargs "
                            f"{dict(model_spec.kwargs)}; fix the class") from None
        field = "model.kwargs" if model_spec.architecture == "custom" else "model"
        raise SpecError(f"{field}: the model cannot be built for inputs {tuple(shape)} and "
                        f"{n_classes} classes ({err.__class__.__name__}: {err})") from None
    return sum(p.numel() for p in model.parameters())


def _accepts(model_spec, shape: tuple[int, ...], n_classes: int) -> bool:
    """Whether the custom class's signature takes the arguments it is built with."""
    import inspect

    cls = resolve_custom(model_spec.path)
    try:
        inspect.signature(cls).bind(in_shape=tuple(shape), n_classes=n_classes,
                                    **model_spec.kwargs)
    except TypeError:
        return False
    except ValueError:   # no signature to read: say what the constructor raised
        return True
    return True


def _where(err: Exception) -> str:
    """`` (file:line)`` of the innermost frame of the error outside torch and pflpipe."""
    import traceback

    frames = [frame for frame in traceback.extract_tb(err.__traceback__)
              if "/torch/" not in frame.filename and "/pflpipe/" not in frame.filename]
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _input_of(spec) -> tuple[tuple[int, ...] | None, int | None]:
    from pflpipe.spec.dataset import n_classes_of
    from pflpipe.spec.spec import IMAGE_SHAPES

    return IMAGE_SHAPES.get(spec.dataset.name), n_classes_of(spec.dataset)
