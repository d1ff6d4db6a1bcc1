"""Writing a results directory (docs/contracts.md): its tables, its models, its summary."""

import dataclasses
import json
import os
from pathlib import Path

import torch

from pflpipe import layout
from pflpipe.compute.totals import client_totals
from pflpipe.data.files import own_state
from pflpipe.engine.data import FederatedData
from pflpipe.engine.records import COMPUTE, diagnostic_columns
from pflpipe.engine.tree import Group, Tree
from pflpipe.layout import HISTORY_CSV, RESULTS_CSV, SHARD_JSON, SUMMARY_MD, client_file
from pflpipe.training.csv_tables import write_csv
from pflpipe.training.score_rows import HISTORY_FIELDS, RESULT_FIELDS


def write_results(out_dir: Path, results: list[dict], history: list[dict],
                  models: dict[str, dict] | None = None, summary: str = "") -> None:
    """Write a results directory: results.csv, history.csv, models/*.pt, summary.md.

    results.csv gets each client's compute over its whole run
    (`pflpipe.compute.totals.client_totals` of `history`) when the history counts it; history.csv
    the compute and diagnostic columns its rows hold.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    totals = client_totals(history)
    idle = dict.fromkeys(COMPUTE, 0) if totals else {}   # a client never sampled cost nothing
    results = [{**row, **totals.get(int(row["client"]), idle)} for row in results]
    counted = COMPUTE if totals else ()
    write_csv(out_dir / RESULTS_CSV, (*RESULT_FIELDS, *counted), results)
    columns = {key for row in history for key in row}
    write_csv(out_dir / HISTORY_CSV,
              (*HISTORY_FIELDS, *counted, *diagnostic_columns(columns)), history)
    for name, state_dict in (models or {}).items():
        path = layout.model_file(out_dir, name)
        path.parent.mkdir(exist_ok=True)
        # a new file, never the old one rewritten: a finished checkpoint may hold a hard link of
        # it (`pflpipe.engine.checkpoint.compact`)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(own_state(state_dict), tmp)
        os.replace(tmp, path)
    (out_dir / SUMMARY_MD).write_text(summary)


def write_shard(out_dir: Path, data: FederatedData, summary) -> None:
    """Record which clients a shard's results directory holds, and its summary (a dataclass)."""
    (Path(out_dir) / SHARD_JSON).write_text(json.dumps(
        {"clients": [data.first_client, data.n_clients],
         "of": data.whole_clients or data.n_clients,
         "summary": dataclasses.asdict(summary)}, indent=1))


def client_models(model: Tree | Group, first_client: int = 0) -> dict[str, dict]:
    """One state_dict per client from a stacked model [C, ...] (docs/contracts.md).

    The first member is client `first_client` (a shard's first).

    A tree's ``model`` group keeps its keys (the file loads into the network); any other group's
    keys are prefixed ``<group>/``.
    """
    if all(isinstance(value, torch.Tensor) for value in model.values()):
        model = {"model": model}
    flat = {(key if group == "model" else f"{group}/{key}"): value
            for group, tensors in model.items() for key, value in tensors.items()}
    n_clients = len(next(iter(flat.values())))
    return {client_file(first_client + c): {k: v[c] for k, v in flat.items()}
            for c in range(n_clients)}
