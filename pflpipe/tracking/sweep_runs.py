"""A sweep in MLflow: a child run per point under the sweep's parent run.

```
sweep parent run (pflpipe run: the spec, its sweep)
└─ point alpha=0.1        tag sweep.point, params sweep.<path> = value, inputs: each seed's split
   │                      (dataset digits-ds2(alpha=0.1)-seed0, digest: its content hash)
   ├─ fedavg, local, ...  per algorithm (collect_results.track), per client below each
   └─ ...
```
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pflpipe.spec.sweep import point_label
from pflpipe.tracking.tracker import NULL_TRACKER, Tracker

#: The tag naming a point's run; its value is the point's label (`pflpipe.spec.sweep`).
POINT_TAG = "sweep.point"
#: The prefix of a point's parameters: its overrides by dotted path.
PARAM_PREFIX = "sweep."


@contextmanager
def point_run(parent: Tracker, label: str, overrides: dict, manifests: list[Path]
              ) -> Iterator[Tracker]:
    """Open the child run of one point under `parent`; NULL_TRACKER when nothing is tracked.

    Its params are the overrides (``sweep.partition.alpha`` = ``0.1``; a section as JSON), and
    each seed's partition (its manifest: dataset, strategy, content hash) is logged as a dataset
    input named by dataset, strategy, the point's partition settings and seed
    (``digits-ds2(alpha=0.1)-seed0``), so the runs table's Dataset column says what the point
    trained on.
    """
    if parent is NULL_TRACKER:
        yield NULL_TRACKER
        return
    with parent.child(f"point {label}", {POINT_TAG: label, "stage": "sweep_point"}) as run:
        run.log_params({PARAM_PREFIX + path: value if isinstance(value, str | int | float)
                        else json.dumps(value, sort_keys=True)
                        for path, value in overrides.items()})
        for path in manifests:
            manifest = json.loads(Path(path).read_text(encoding="utf-8"))
            part = manifest["partition"]
            name = (f"{manifest['dataset']['name']}-{part['strategy']}"
                    f"{_split_settings(overrides)}-seed{manifest['seed']}")
            run.log_dataset(name, manifest["content_hash"][:16], Path(path).parent.as_uri())
        yield run


def _split_settings(overrides: dict) -> str:
    """The partition settings a point sets, as ``(alpha=0.1)``; empty when it sets none."""
    settings = {}
    for path, value in overrides.items():
        if path == "partition" and isinstance(value, dict):
            settings |= {f"partition.{k}": v for k, v in value.items() if k != "strategy"}
        elif path.startswith("partition."):
            settings[path] = value
    return f"({point_label(settings)})" if settings else ""
