"""Write a partition directory in other tools' layouts (`pflpipe split --export FORMAT DIR`).

- `pfllib`: PFLlib's dataset folder, `train/<k>.npz`, `test/<k>.npz` (and `val/<k>.npz` when
  there is a validation split), each `data` = {'x', 'y'}, plus `config.json`. PFLlib's
  `read_client_data` reads it, and so does the `client_files` dataset (layout `pfllib`).
- `flower`: `partition_<k>/train.npz`, `test.npz` (and `val.npz` when there is a validation
  split) with arrays `x`, `y`, plus `partitions.json`; the exported Flower app loads its
  `partition-id`, and so does the `client_files` dataset (layout `flower`).

With the spec, both also get the reproduction package of the FedAvg warm start
(`pflpipe.data.reproduce`), for a classification: a regression's is not written, since pflpipe
trains it with the summed Gaussian NLL, which neither the exported app nor PFLlib computes.
- `npz`: `indices.npz`, each client's row positions in the pooled dataset (`train_<k>`, ...),
  read back by the `predefined` partition (`path: DIR/indices.npz`) on the same dataset.

`pfllib` and `flower` hold model inputs: float32 samples with the partition's normalisation
applied, so another tool trains on exactly the values pflpipe trains on. Clients keep their
numbers and every split its row order.
"""

import json
from pathlib import Path

import numpy as np

from pflpipe.data.artifact import load_partition
from pflpipe.data.client_split import SPLITS, ClientIndices
from pflpipe.data.predefined import write_index_file
from pflpipe.errors import DataError
from pflpipe.layout import (
    APP_OUTPUTS,
    EXPORT_INDEX_NPZ,
    FLOWER_PARTITIONS_JSON,
    PFLLIB_CONFIG_JSON,
)
from pflpipe.overwrite import claim_dir

FORMATS = ("pfllib", "flower", "npz")


def export_partition(partition_dir: Path, fmt: str, out_dir: Path, *, spec=None,
                     seed: int | None = None, force: bool = False) -> list[Path]:
    """Write the partition in `partition_dir` in format `fmt` into `out_dir`; return the files.

    With the `spec` (and the partition's `seed`), `flower` and `pfllib` also get the
    reproduction package (`pflpipe.data.reproduce`). `out_dir` must be empty, missing or an
    earlier export, whose files are removed first; other files there (or an earlier export's
    edited files) are an error unless `force` (`pflpipe.overwrite`: then the export's files
    replace theirs by name and nothing else is touched).
    """
    if fmt not in FORMATS:
        raise DataError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    claim = claim_dir(Path(out_dir), "pflpipe split --export", force=force, option="--export",
                      keep=APP_OUTPUTS)
    out_dir = claim.path
    out_dir.mkdir(parents=True, exist_ok=True)
    partition = load_partition(partition_dir, transform=fmt != "npz")
    files = {"pfllib": _pfllib, "flower": _flower, "npz": _npz}[fmt](partition, out_dir)
    if spec is not None and fmt != "npz" and partition.task == "classification":
        from pflpipe.data import reproduce

        files += reproduce.write(out_dir, fmt, spec,
                                 partition.manifest["seed"] if seed is None else seed, partition)
    claim.record(files)
    return files


def _pfllib(partition, out_dir: Path) -> list[Path]:
    files = []
    for client in partition.clients:
        for split in SPLITS:
            part = client.split(split)
            if split == "val" and not len(part):
                continue
            (out_dir / split).mkdir(exist_ok=True)
            path = out_dir / split / f"{client.client_id}.npz"
            with path.open("wb") as handle:  # PFLlib's own writer: a pickled dict under 'data'
                np.savez_compressed(handle, data={"x": part.x.numpy(), "y": part.y.numpy()})
            files.append(path)
    manifest = partition.manifest
    config = {"num_clients": partition.n_clients, "num_classes": partition.n_classes,
              "non_iid": manifest["partition"]["strategy"] != "iid",
              "partition": manifest["partition"]["strategy"],
              "Size of samples for labels in clients": [
                  [[c, int(n)] for c, n in enumerate(np.sum([entry["counts"][s] for s in SPLITS],
                                                            axis=0)) if n]
                  for entry in manifest["clients"]] if partition.n_classes else None,
              "pflpipe": _provenance(partition)}
    files.append(_json(out_dir / PFLLIB_CONFIG_JSON, config))
    return files


def _flower(partition, out_dir: Path) -> list[Path]:
    files = []
    for client in partition.clients:
        directory = out_dir / f"partition_{client.client_id}"
        directory.mkdir(exist_ok=True)
        for split in SPLITS:
            part = client.split(split)
            if split == "val" and not len(part):
                continue
            np.savez(directory / f"{split}.npz", x=part.x.numpy(), y=part.y.numpy())
            files.append(directory / f"{split}.npz")
    files.append(_json(out_dir / FLOWER_PARTITIONS_JSON, {
        "num_partitions": partition.n_clients, "n_classes": partition.n_classes,
        "input_shape": list(partition.input_shape), "task": partition.task,
        "pflpipe": _provenance(partition)}))
    return files


def _npz(partition, out_dir: Path) -> list[Path]:
    clients = [ClientIndices(**{split: client.split(split).index.numpy() for split in SPLITS})
               for client in partition.clients]
    write_index_file(out_dir / EXPORT_INDEX_NPZ, clients)
    return [out_dir / EXPORT_INDEX_NPZ]


def _provenance(partition) -> dict:
    manifest = partition.manifest
    return {"content_hash": manifest["content_hash"], "dataset": manifest["dataset"]["name"],
            "seed": manifest["seed"], "transform": manifest["dataset"]["transform"]}


def _json(path: Path, content: dict) -> Path:
    path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")
    return path
