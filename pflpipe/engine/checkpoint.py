"""A run's checkpoints in a store: what `Federation` writes after a round and resumes from.

After round r the store holds ``round_r.pt`` (the global state_dict), ``state_r.pt`` (everything
else the next rounds depend on), ``rows_r.pt`` (the score rows added since the previous
checkpoint) and, written last, ``progress.json``; older state files (and older round files
unless every round is kept) are deleted. The rows go in chunks, each written once, so a
checkpoint costs the same in round 100 as in round 1 (rewriting every row each round made the
checkpoints of a 100-round run most of its time); the state file names the chunks it continues.

A client's last and best-val models (`SHARED`) are mostly tensors already in the file: its state
(a local model), the round's global model (FedAvg scores it), or its last model (best at the last
round). The state file writes such a client's row as a reference (`REF`): a client costs one copy
of its weights per kept group, not three or four. `resume` rebuilds them bit for bit.

A finished stage's checkpoint is never trained on again (its key holds the rounds), only reused:
the stage writes its results from it once more. Once the stage has written its results,
`compact` shrinks it to what that reads (`FINISHED`): the clients' states and last models go,
and each client's best model becomes a hard link of the results' model file of that client
(`IN_FILES`, where the store is a local directory: `LocalStore.link`, a copy on another file
system; in an S3 store the rows stay in the state file). The run then holds its clients' best
models once on disk, not twice.
"""

import io
import json
import logging
from pathlib import Path

import torch
from torch import Tensor

from pflpipe.data.files import load_tensors, own_storage
from pflpipe.engine.optim import MOMENTS
from pflpipe.errors import DataError, DivergenceError
from pflpipe.layout import (
    MODELS,
    PROGRESS_JSON,
    is_state_key,
    round_key,
    round_of,
    rows_key,
    rows_round_of,
    state_key,
)
from pflpipe.storage.store_protocol import Store

log = logging.getLogger(__name__)
#: The snapshot's record of its rows' chunks: [[round, number of rows up to it], ...].
CHUNKS = "row_chunks"
#: The snapshot's per-client model trees written as references, in order (each may name those
#: before it, the state and the global model).
SHARED = ("last_model", "best_model")
#: A tensor of a `SHARED` tree as written: {REF: [source, ...], "pick": [C] index of the source
#: each client's row equals (-1: in "rows"), "rows": the rows no source holds}; a source is
#: ["global", key] (the global model's tensor, every client's row) or [tree, group, key].
REF = "same_as"
#: Set in a state file `compact` wrote: the snapshot of a finished run, its clients' states and
#: last models dropped (a resume returns them empty).
FINISHED = "finished"
#: A compacted snapshot's best models as store keys (``models/client_NNNN.pt``), one per client
#: in client order, each a hard link of that client's results file
#: (`pflpipe.training.results_files`).
IN_FILES = "in_files"
#: What a finished snapshot no longer needs: what continuing its rounds would read.
_CONTINUE_ONLY = ("state", "last_model")


def save(store: Store, snap: dict, round_idx: int, fingerprint: str,
         keep_every_round: bool) -> None:
    """Write round `round_idx`'s global model, the rest of `snap` and the progress marker.

    `snap[CHUNKS]` (the rows' chunks written so far, as [round, rows up to it]) is updated.
    """
    rows, chunks = snap["rows"], [c for c in snap.get(CHUNKS, []) if c[0] < round_idx]
    start = chunks[-1][1] if chunks else 0
    _put(store, rows_key(round_idx), rows[start:])
    snap[CHUNKS] = chunks = [*chunks, [round_idx, len(rows)]]
    _put(store, round_key(round_idx), snap["global"])
    state = {k: v for k, v in snap.items() if k not in ("global", "rows")}
    _put(store, state_key(round_idx), {**state, **_references(snap)})
    mark(store, round_idx, snap["stopped"], fingerprint)
    kept = {rows_key(r) for r, _ in chunks}
    for key in store.list():
        if is_state_key(key) and key != state_key(round_idx):
            store.delete(key)
        elif round_of(key) is not None and not keep_every_round and key != round_key(round_idx):
            store.delete(key)
        elif rows_round_of(key) is not None and key not in kept:
            store.delete(key)


def mark(store: Store, round_idx: int, stopped: bool, fingerprint: str) -> None:
    """Write the progress marker: round `round_idx` is the last checkpointed one."""
    store.put_bytes(PROGRESS_JSON, json.dumps({
        "rounds_completed": round_idx, "stopped_early": stopped,
        "fingerprint": fingerprint}).encode())


def keep(store: Store, global_params: dict, round_idx: int) -> None:
    """Write round `round_idx`'s global model alone (a round between checkpoints)."""
    _put(store, round_key(round_idx), global_params)


def resume(store: Store, fingerprint: str, device: torch.device) -> dict | None:
    """The snapshot of the last checkpointed round, or None when the store holds none."""
    progress = progress_of(store)
    if progress is None:
        return None
    if progress.get("fingerprint") != fingerprint:
        raise DivergenceError(
            f"{store.uri} holds checkpoints of another configuration "
            f"({progress.get('fingerprint')!r}, expected {fingerprint!r}); "
            "move them away or point the storage elsewhere")
    round_idx = progress["rounds_completed"]
    snap = load(store, state_key(round_idx), device)
    snap["global"] = load(store, round_key(round_idx), device)
    if snap.get(FINISHED):
        snap.update({name: {} for name in _CONTINUE_ONLY})
        if IN_FILES in snap["best_model"]:
            snap["best_model"] = _from_files(store, snap["best_model"][IN_FILES], device)
    _dereference(snap)
    if "rows" not in snap:                     # (a state file of the older layout holds them)
        snap["rows"] = _rows(store, snap[CHUNKS], device)
    old = snap.pop("server_optimizer", None)   # written before the moments joined the server
    if old:                                    # state (`optim.MOMENTS`)
        snap["server"].update(zip(MOMENTS, (old["m"], old["v"]), strict=True))
    log.info("resuming from round %d of %s", round_idx, store.uri)
    return snap


def compact(store: Store, files: list[Path] | None = None) -> bool:
    """Shrink a finished run's last checkpoint to what reusing it reads (`FINISHED`), once.

    `files`: the results' model file of each client's best model, in client order (as
    `pflpipe.training.results_files.client_models` writes them); a local store keeps hard links
    of them (`LocalStore.link`), another the rows in its state file. Returns whether it wrote.
    """
    progress = progress_of(store)
    if progress is None:
        return False
    round_idx, cpu = progress["rounds_completed"], torch.device("cpu")
    # mapped, not read, where the store is a local folder: the trees it drops (the clients'
    # states and models, most of the file) are never brought into memory
    snap = _load_mapped(store, state_key(round_idx))
    if snap.get(FINISHED):
        return False
    kept = {k: v for k, v in snap.items() if k not in _CONTINUE_ONLY}
    keys = _link(store, files) if files else None
    if keys is None:   # the best models stay rows of the file: rebuilt, then written as such
        kept["global"] = load(store, round_key(round_idx), cpu)
        _dereference({**kept, **{k: snap[k] for k in _CONTINUE_ONLY if k in snap}})
        kept.update(_references(kept))
        del kept["global"]
    else:
        kept["best_model"] = {IN_FILES: keys}
    _put(store, state_key(round_idx), {**kept, FINISHED: True})
    return True


def _load_mapped(store: Store, key: str):
    """`load` onto the CPU, the tensors mapped from the file where the store has one."""
    local_path = getattr(store, "local_path", None)
    if local_path is None:
        return load(store, key, torch.device("cpu"))
    return load_tensors(local_path(key), "a checkpoint the engine wrote", "cpu", mmap=True)


def _link(store: Store, files: list[Path]) -> list[str] | None:
    """Link each file into the store's ``models/``; their keys, or None where it cannot link."""
    link = getattr(store, "link", None)
    if link is None:   # an S3 store: the rows stay in the state file
        return None
    keys = [f"{MODELS}/{Path(path).name}" for path in files]
    for key, path in zip(keys, files, strict=True):
        link(key, path)
    return keys


def _from_files(store: Store, keys: list[str], device: torch.device) -> dict:
    """The stacked best-model tree [C, ...] of the clients' files `_link` linked.

    A file's keys are the ``model`` group's as they are and ``<group>/<key>`` for another group.
    """
    rows = [load(store, key, device) for key in keys]
    tree: dict = {}
    for name in rows[0]:
        group, key = name.split("/", 1) if "/" in name else ("model", name)
        tree.setdefault(group, {})[key] = torch.stack([row[name] for row in rows])
    return tree


def _rows(store: Store, chunks: list, device: torch.device) -> list[dict]:
    """The score rows of the chunks a state file names, in order; DataError if one is short."""
    rows = []
    for round_idx, end in chunks:
        rows += load(store, rows_key(round_idx), device)
        if len(rows) != end:
            raise DataError(f"{store.uri}/{rows_key(round_idx)}: holds the rows up to {len(rows)}"
                            f", where the checkpoint expects {end}; move the checkpoints away")
    return rows


def _references(snap: dict) -> dict:
    """`snap`'s `SHARED` trees with each client row found in an earlier source as a reference."""
    out = {}
    for name in (n for n in SHARED if n in snap):
        sources = [(["state", g, k], t) for g, group in snap.get("state", {}).items()
                   for k, t in group.items()]
        sources += [([earlier, g, k], t) for earlier in SHARED[:SHARED.index(name)]
                    if earlier in snap for g, group in snap[earlier].items()
                    for k, t in group.items()]
        out[name] = {g: {k: _reference(t, k, snap["global"], sources) for k, t in group.items()}
                     for g, group in snap[name].items()}
    return out


def _reference(tensor: Tensor, key: str, global_params: dict, sources: list) -> dict | Tensor:
    """`tensor` [C, ...] as a `REF` record: each row's first bit-equal source, or the row.

    An empty or unstacked (0-d) tensor is written as it is.
    """
    if tensor.dim() == 0 or tensor.numel() == 0:
        return tensor
    n = len(tensor)
    candidates = [(["global", key], global_params[key].unsqueeze(0))] if (
        key in global_params and global_params[key].shape == tensor.shape[1:]
        and global_params[key].dtype == tensor.dtype) else []
    candidates += [(path, t) for path, t in sources
                   if t.shape == tensor.shape and t.dtype == tensor.dtype]
    pick = torch.full((n,), -1, dtype=torch.int64, device=tensor.device)
    bits = _bits(tensor, n)
    for i, (_, source) in enumerate(candidates):
        same = (_bits(source, len(source)) == bits).all(1)
        pick[(pick < 0) & same] = i
    return {REF: [path for path, _ in candidates], "pick": pick, "rows": tensor[pick < 0]}


def _bits(tensor: Tensor, n: int) -> Tensor:
    """`tensor`'s n rows as bytes (equal bytes: equal values, -0.0 and NaNs told apart)."""
    return tensor.reshape(n, -1).contiguous().view(torch.uint8)


def _dereference(snap: dict) -> None:
    """Rebuild `snap`'s `SHARED` trees from the `REF` records `_references` wrote, in place."""
    for name in (n for n in SHARED if n in snap):
        for group in snap[name].values():
            for k, record in group.items():
                if isinstance(record, dict) and REF in record:
                    group[k] = _rebuilt(record, snap)


def _rebuilt(record: dict, snap: dict) -> Tensor:
    """The tensor a `REF` record stands for; its sources in `snap` are already rebuilt."""
    pick, rows = record["pick"], record["rows"]
    out = rows.new_empty((len(pick), *rows.shape[1:]))
    out[pick < 0] = rows
    for i, path in enumerate(record[REF]):
        source = (snap["global"][path[1]].unsqueeze(0) if path[0] == "global"
                  else snap[path[0]][path[1]][path[2]])
        chosen = pick == i
        out[chosen] = source.expand_as(out)[chosen]
    return out


def progress_of(store: Store) -> dict | None:
    """The progress record a store's last checkpoint wrote; None when it holds none."""
    if not store.exists(PROGRESS_JSON):
        return None
    return json.loads(store.get_bytes(PROGRESS_JSON))


def _put(store: Store, key: str, obj) -> None:
    """Write `obj` as `dump` does under `key`: streamed into the file where the store has one."""
    put_with = getattr(store, "put_with", None)
    if put_with is None:
        store.put_bytes(key, dump(obj))
    else:
        put_with(key, lambda handle: torch.save(to_cpu(obj), handle))


def dump(obj) -> bytes:
    """Serialize tensors (moved to the CPU), dicts and lists with torch.save."""
    buffer = io.BytesIO()
    torch.save(to_cpu(obj), buffer)
    return buffer.getvalue()


def load(store: Store, key: str, device: torch.device):
    """Load what `dump` wrote onto `device`; a damaged or tampered file is a DataError naming it."""
    return load_tensors(io.BytesIO(store.get_bytes(key)), "a checkpoint the engine wrote", device,
                        f"{store.uri}/{key}")


def to_cpu(obj):
    """`obj` with every tensor (in dicts and lists) detached, on the CPU and its own storage."""
    if isinstance(obj, Tensor):
        return own_storage(obj)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    return obj
