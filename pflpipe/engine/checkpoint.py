"""A run's checkpoints in a store: what `Federation` writes after a round and resumes from.

After round r the store holds ``round_r.pt`` (the global state_dict), ``state_r.pt`` (everything
else the next rounds depend on) and, written last, ``progress.json``; older state files (and
older round files unless every round is kept) are deleted.
"""

import io
import json
import logging

import torch
from torch import Tensor

from pflpipe.data.files import load_tensors
from pflpipe.errors import DivergenceError
from pflpipe.storage.base import Store

log = logging.getLogger(__name__)


def save(store: Store, snap: dict, round_idx: int, fingerprint: str,
         keep_every_round: bool) -> None:
    """Write round `round_idx`'s global model, the rest of `snap` and the progress marker."""
    store.put_bytes(f"round_{round_idx:04d}.pt", dump(snap["global"]))
    store.put_bytes(f"state_{round_idx:04d}.pt", dump({k: v for k, v in snap.items()
                                                       if k != "global"}))
    store.put_bytes("progress.json", json.dumps({
        "rounds_completed": round_idx, "stopped_early": snap["stopped"],
        "fingerprint": fingerprint}).encode())
    for key in store.list():
        if key.startswith("state_") and key != f"state_{round_idx:04d}.pt":
            store.delete(key)
        elif (key.startswith("round_") and not keep_every_round
              and key != f"round_{round_idx:04d}.pt"):
            store.delete(key)


def resume(store: Store, fingerprint: str, device: torch.device) -> dict | None:
    """The snapshot of the last checkpointed round, or None when the store holds none."""
    if not store.exists("progress.json"):
        return None
    progress = json.loads(store.get_bytes("progress.json"))
    if progress.get("fingerprint") != fingerprint:
        raise DivergenceError(
            f"{store.uri} holds checkpoints of another configuration "
            f"({progress.get('fingerprint')!r}, expected {fingerprint!r}); "
            "move them away or point the storage elsewhere")
    round_idx = progress["rounds_completed"]
    snap = load(store, f"state_{round_idx:04d}.pt", device)
    snap["global"] = load(store, f"round_{round_idx:04d}.pt", device)
    log.info("resuming from round %d of %s", round_idx, store.uri)
    return snap


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
    """`obj` with every tensor (in dicts and lists) detached and on the CPU."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    return obj
