"""A client that joins after training (thesis §7.1).

It picks its teacher among the stored per-round global models with its own validation data only,
then runs the λ/T grid.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pflpipe import layout
from pflpipe.data.files import own_state
from pflpipe.distill import GridConfig, choose_rounds, run_grid
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.evaluate import evaluate
from pflpipe.errors import DataError
from pflpipe.spec.partition import Fractions
from pflpipe.stages.distill_grid_search import GRID_FIELDS
from pflpipe.training import csv_tables, resumable_rounds, stage_setup


@dataclass(frozen=True)
class NewcomerResult:
    """The newcomer's teacher round, chosen (λ, T) and scores."""

    teacher_round: int
    chosen: dict
    teacher_test_accuracy: float
    sizes: tuple[int, int, int]

    def to_text(self) -> str:
        """A few plain lines for the terminal."""
        c = self.chosen
        return (f"newcomer: {self.sizes[0]} train, {self.sizes[1]} val, {self.sizes[2]} test "
                f"samples\n"
                f"teacher:  round {self.teacher_round} of the warm start, chosen on the "
                f"newcomer's validation split; its test accuracy "
                f"{self.teacher_test_accuracy:.4f}\n"
                f"student:  λ = {c['lam']:g}, T = {c['temperature']:g} (best on validation): "
                f"val accuracy {c['val_accuracy']:.4f}, test accuracy {c['test_accuracy']:.4f}")

    def to_markdown(self) -> str:
        """A short summary."""
        c = self.chosen
        return (f"**personalize-new**: {self.sizes[0]}/{self.sizes[1]}/{self.sizes[2]} "
                f"train/val/test samples; teacher round {self.teacher_round} (test accuracy "
                f"{self.teacher_test_accuracy:.4f}); chosen λ = {c['lam']:g}, "
                f"T = {c['temperature']:g}: val accuracy {c['val_accuracy']:.4f}, "
                f"test accuracy {c['test_accuracy']:.4f}\n")


def run(spec, client_file: Path, partition_dir: Path, checkpoints_dir: Path, out_dir: Path,
        seed: int = 0) -> NewcomerResult:
    """Choose the newcomer's teacher and distil it over the spec's grid; write `out_dir`."""
    s = stage_setup.setup(spec, seed, partition_dir)
    data = _client_data(spec, Path(client_file), partition_dir, seed).to(s.device)
    rounds = _rounds(Path(checkpoints_dir))
    stacked = [resumable_rounds.load_round(checkpoints_dir, r, s.device) for r in rounds]
    params = {k: torch.stack([p[k] for p in stacked]) for k in s.init}
    zeros = torch.zeros(len(rounds), dtype=torch.long, device=s.device)
    scores = {split: evaluate(s.ctx, lambda st, sh, x, c: c.forward(st["model"], x),
                              {"model": params}, {}, data.split(split), zeros)
              for split in ("val", "test")}
    if spec.distillation.teacher == "last_round":
        row = len(rounds) - 1
    else:
        row = int(choose_rounds(scores["val"][0][1:, None].cpu(),
                                scores["val"][1][1:, None].cpu(), spec.teachers.criterion)[0]) + 1
    dist = spec.distillation
    config = GridConfig(lambdas=tuple(dist.lambdas), temperatures=tuple(dist.temperatures),
                        epochs=dist.epochs,
                        batch_size=dist.batch_size or spec.federation.batch_size,
                        lr=dist.lr or spec.federation.lr, objective=dist.objective,
                        selection_split=dist.selection_split, optimizer=stage_setup.optimizer(spec),
                        seed=seed)
    grid = run_grid(s.ctx, s.trainer, data, {k: v[row:row + 1] for k, v in params.items()}, config)
    result = NewcomerResult(rounds[row], grid.chosen[0], float(scores["test"][1][row]),
                            tuple(int(data.split(n).counts[0]) for n in ("train", "val", "test")))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / layout.TEACHER_JSON).write_text(json.dumps({
        "round": rounds[row], "criterion": spec.teachers.criterion,
        "val_loss_by_round": dict(zip(rounds, scores["val"][0].tolist(), strict=True))}, indent=2))
    csv_tables.write_csv(out / layout.GRID_CSV, GRID_FIELDS, grid.grid)
    torch.save(own_state({k: v[0] for k, v in grid.params.items()}), out / layout.MODEL_PT)
    (out / layout.SUMMARY_MD).write_text(result.to_markdown())
    return result


def _rounds(checkpoints_dir: Path) -> list[int]:
    rounds = layout.rounds_in(checkpoints_dir)
    if len(rounds) < 2:
        raise DataError(f"{checkpoints_dir} holds {len(rounds)} round checkpoint(s); the warm "
                        f"start must have kept every round ({layout.round_key(0)}, "
                        f"{layout.round_key(1)}, …)")
    return rounds


def _check_scale(path: Path, x: np.ndarray, partition_dir: Path) -> None:
    """Refuse a newcomer whose raw features lie on another scale than the clients' training data.

    The stored models saw the partition's transform of the clients' raw values; digits divided
    by 16, or times 16, would run and choose another teacher without a word. Out of range: beyond
    the clients' range by more than its width. Squeezed: all within the bottom eighth of it.
    """
    from pflpipe.data import load_partition

    clients = load_partition(partition_dir, transform=False).clients
    per_client = [c.split("train").x.flatten().to(torch.float64) for c in clients]
    train = torch.cat(per_client)
    low, high, new_low, new_high = (float(train.min()), float(train.max()), float(x.min()),
                                    float(x.max()))
    width = high - low
    margin = max(width, abs(low), abs(high))
    if new_low < low - margin or new_high > high + margin:
        how = "larger scale (multiplied by a constant?)"
    elif width > 0 and new_high < low + width / 8 and new_high - new_low < width / 8:
        how = "smaller scale (divided by a constant?)"
    else:
        _check_location(path, x, train, per_client)
        return
    raise DataError(f"{path}: x lies in [{new_low:g}, {new_high:g}] but the clients' training "
                    f"data in [{low:g}, {high:g}]: the newcomer's features are on a {how}, so "
                    f"the stored models would see inputs unlike any they were trained on. {FIX}")


#: How to give a newcomer's features (the end of every refusal about them).
FIX = ("Give x in the dataset's raw format, as the clients' data are stored (pflpipe applies the "
       "partition's transform)")


def _check_location(path: Path, x: np.ndarray, train: torch.Tensor,
                    per_client: list[torch.Tensor]) -> None:
    """Refuse a newcomer whose features are shifted (x + c, −x) from the clients' training data.

    The newcomer's mean feature value may differ from the clients' pooled mean as much as any
    client's own mean does, plus one pooled standard deviation; digits shifted by ±8 or negated
    (0…16 against the clients' mean 4.9, sd 6.0) lie 8 to 10 away.
    """
    mean, sd = float(train.mean()), float(train.std())
    means = [float(c.mean()) for c in per_client if c.numel()]
    allowed = max(abs(m - mean) for m in means) + sd
    new = float(np.mean(x, dtype=np.float64))
    if abs(new - mean) <= allowed:
        return
    raise DataError(f"{path}: x's mean value is {new:.3g} but the clients' training data's is "
                    f"{mean:.3g} (each client's own mean within {mean - allowed + sd:.3g} … "
                    f"{mean + allowed - sd:.3g}, standard deviation {sd:.3g}): the newcomer's "
                    "features are shifted (a constant added, or negated?), so the stored models "
                    f"would see inputs unlike any they were trained on. {FIX}")


def _client_data(spec, path: Path, partition_dir: Path, seed: int) -> FederatedData:
    """The newcomer's samples, transformed like the partition's and split per the spec."""
    from pflpipe.data import read_manifest
    from pflpipe.data.artifact import apply_transform
    from pflpipe.data.client_split import split_client
    from pflpipe.data.files import check_labels, check_samples, read_arrays

    arrays = read_arrays(path)
    if "x" not in arrays or "y" not in arrays:
        raise DataError(f"{path}: needs arrays x and y (found {sorted(arrays) or 'none'})")
    manifest = read_manifest(partition_dir)
    shape = tuple(manifest["dataset"]["input_shape"])
    x = check_samples(path, arrays["x"])
    if x[0].size != np.prod(shape):
        raise DataError(f"{path}: samples of shape {x.shape[1:]} do not match the dataset's "
                        f"input shape {shape}")
    if len(x) != len(arrays["y"].reshape(-1)):
        raise DataError(f"{path}: needs arrays x and y of equal length (got x {x.shape}, y "
                        f"{arrays['y'].shape})")
    x = x.reshape(len(x), *shape)
    y, _ = check_labels(path, arrays["y"], manifest["dataset"]["n_classes"])
    # a predefined partition has no fractions: the newcomer's data is split by the defaults
    fractions = getattr(spec.partition, "fractions", None) or Fractions()
    needed = 1 + (fractions.val > 0) + (fractions.test > 0)
    if len(y) < needed:
        raise DataError(f"{path}: the newcomer has {len(y)} sample(s); at least {needed} are "
                        "needed (one each for train, val and test: its teacher round and (λ, T) "
                        "are chosen on validation, its score is taken on test); give it more "
                        "samples")
    _check_scale(path, x, partition_dir)
    parts = split_client(np.arange(len(y)), y, fractions.val, fractions.test,
                         np.random.default_rng([seed, 911]), client_id=0)
    features = apply_transform(torch.from_numpy(x), manifest["dataset"]["transform"])
    labels = torch.from_numpy(y)
    return FederatedData(**{name: SplitData.from_clients([features[idx]], [labels[idx]])
                            for name, idx in (("train", parts.train), ("val", parts.val),
                                              ("test", parts.test))})
