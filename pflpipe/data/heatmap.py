"""Draw the clients × classes sample counts of a partition as a PNG heatmap (matplotlib, Agg)."""

from pathlib import Path

import numpy as np

from pflpipe.data.client_split import SPLITS

#: Cells are annotated with their count up to this many clients × classes.
ANNOTATE_CELLS = 400
#: Target values are binned into this many columns for a regression dataset.
REGRESSION_BINS = 10


def count_matrix(manifest: dict, targets: list[np.ndarray] | None = None
                 ) -> tuple[np.ndarray, list[str]]:
    """Return the [clients, columns] count matrix and the column labels.

    Classification: counts per class summed over the splits. Regression: each client's targets
    (given in `targets`) binned over the pooled range.
    """
    if manifest["dataset"]["n_classes"] is not None:
        counts = np.array([np.sum([entry["counts"][split] for split in SPLITS], axis=0)
                           for entry in manifest["clients"]])
        return counts.reshape(len(manifest["clients"]), -1), [
            str(c) for c in range(manifest["dataset"]["n_classes"])]
    pooled = np.concatenate(targets) if targets else np.zeros(1)
    edges = np.histogram_bin_edges(pooled, bins=REGRESSION_BINS)
    counts = np.array([np.histogram(values, bins=edges)[0] for values in targets])
    return counts, [f"{edge:.2g}" for edge in edges[:-1]]


def draw_heatmap(manifest: dict, plan, path: Path) -> Path:
    """Draw the heatmap of a partition (its manifest and, for regression, its plan's targets)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    targets = None
    if manifest["dataset"]["n_classes"] is None:
        targets = [plan.labels[np.concatenate([client[s] for s in SPLITS])]
                   for client in plan.clients]
    counts, columns = count_matrix(manifest, targets)
    n_clients, n_columns = counts.shape
    # capped: past ~1,500 × 1,000 pixels a heatmap shows no more, but rendering costs memory
    width = min(4 + 0.35 * n_columns, 15)
    height = min(2 + 0.3 * n_clients, 10)
    figure = Figure(figsize=(width, height))
    axes = figure.subplots()
    image = axes.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    figure.colorbar(image, ax=axes, label="samples")
    what = "class" if targets is None else "target bin (lower edge)"
    axes.set_xlabel(what)
    axes.set_ylabel("client")
    axes.set_title(f"{manifest['dataset']['name']}, {manifest['partition']['strategy']}, "
                   f"seed {manifest['seed']}: samples per client and {what}")
    if n_columns <= 40:
        axes.set_xticks(range(n_columns), columns, rotation=90 if targets is not None else 0)
    if n_clients <= 50:
        axes.set_yticks(range(n_clients))
    if counts.size <= ANNOTATE_CELLS:
        threshold = counts.max() / 2 if counts.size else 0
        for (row, column), value in np.ndenumerate(counts):
            axes.text(column, row, str(value), ha="center", va="center", fontsize=7,
                      color="black" if value > threshold else "white")
    figure.tight_layout()
    figure.savefig(path, dpi=100)  # Figure renders through the Agg canvas by default
    return Path(path)
