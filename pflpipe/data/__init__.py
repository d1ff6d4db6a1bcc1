"""The data generator: datasets, split strategies, per-client splits and the partition directory.

Load a dataset, split it over simulated clients and per client into train/val/test, and write or
read the partition directory (see docs/contracts.md).

Heavy libraries (torch, torchvision, scikit-learn, matplotlib) are imported only when used.
"""

from pflpipe.data.artifact import (
    ClientData,
    Partition,
    StoredSplit,
    load_partition,
    read_manifest,
    write_partition,
)
from pflpipe.data.client_split import ClientIndices
from pflpipe.data.datasets import Pooled, Transform, load_pooled
from pflpipe.data.plan import PartitionPlan, partition_dataset

__all__ = [
    "ClientData", "ClientIndices", "Partition", "PartitionPlan", "Pooled", "StoredSplit",
    "Transform", "load_partition", "load_pooled", "partition_dataset", "read_manifest",
    "write_partition",
]
