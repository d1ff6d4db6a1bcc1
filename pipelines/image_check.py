"""``python -m pflpipe.pipelines.image_check``: can this environment run every stage?

The component images run it as the last step of their build, so an image that cannot run a stage
fails to build instead of failing in a cluster. It imports every module of pflpipe (its
components and pipelines too), every dependency the distribution declares, what kfp runs in a
task (``kfp.dsl.executor_main``) and matplotlib's pyplot; it runs a torchvision operator (a
torchvision built for another torch imports fine and fails only there: ``operator
torchvision::nms does not exist``) and checks gloo, the backend of the sharded workers. Loading
matplotlib's font manager writes its font cache, so no stage rebuilds it at start.
"""

import importlib
import importlib.metadata
import pkgutil
import re
import sys
from dataclasses import dataclass

#: Packages whose every module is imported.
PACKAGES = ("pflpipe", "pflpipe.components", "pflpipe.pipelines")
#: Modules a task imports that no module of pflpipe imports at its top.
RUNTIME = ("kfp.dsl.executor_main", "matplotlib.pyplot", "torch.distributed", "torchvision.ops")


@dataclass(frozen=True)
class ImageReport:
    """What the check found in a working environment."""

    modules: int
    torch: str
    torchvision: str
    fonts: int

    def __str__(self) -> str:
        return (f"image check: {self.modules} modules import; torch {self.torch}, torchvision "
                f"{self.torchvision} (nms runs), gloo available; {self.fonts} fonts cached")


class ImageCheckFailed(Exception):
    """Something a stage needs is missing or broken; the message names it."""


def module_names() -> list[str]:
    """Every module of `PACKAGES`, the declared dependencies' top-level modules and `RUNTIME`."""
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names.append(package)
        names += [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return list(dict.fromkeys([*names, *dependency_modules(), *RUNTIME]))


def dependency_modules() -> list[str]:
    """The top-level modules of pflpipe's required (not optional) dependencies."""
    provides: dict[str, list[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(_normal(dist), []).append(module)
    found = []
    for requirement in importlib.metadata.requires("pflpipe") or []:
        if "extra ==" in requirement:
            continue
        name = _normal(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        found += sorted(m for m in provides.get(name, []) if not m.startswith("_"))
    return found


def check() -> ImageReport:
    """Import and exercise what the stages need.

    Raises:
        ImageCheckFailed: naming the module or operator that fails, with its error.

    """
    names = module_names()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any import error fails the image, named
            raise ImageCheckFailed(f"import {name} fails: {type(err).__name__}: {err}") from err
    import torch
    import torchvision
    from matplotlib import font_manager

    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 10.0, 10.0], [20, 20, 30, 30]])
    try:
        kept = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    except Exception as err:  # noqa: BLE001 - the operator's registration error, named
        raise ImageCheckFailed(f"torchvision {torchvision.__version__} does not run with torch "
                               f"{torch.__version__} (torchvision.ops.nms: {err}); install "
                               "the torchvision built for this torch") from err
    if kept.tolist() != [0, 2]:
        raise ImageCheckFailed(f"torchvision.ops.nms kept boxes {kept.tolist()}, not [0, 2]")
    if not torch.distributed.is_gloo_available():
        raise ImageCheckFailed("torch.distributed has no gloo backend (engine.workers needs it)")
    fonts = len(font_manager.fontManager.ttflist)
    return ImageReport(len(names), torch.__version__, torchvision.__version__, fonts)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    """Print the report; exit 1 with the failure otherwise."""
    try:
        print(check())
    except ImageCheckFailed as err:
        print(f"image check failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
