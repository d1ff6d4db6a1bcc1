"""The built-in networks.

Each has a `base` and a `head` submodule; the head (its state-dict prefix ``head.``) is what
FedPer, FedRep and pFedVEM keep per client.
"""

import math

from torch import nn


def _after_two_convs(size: int) -> int:
    """Side length after two (5×5 valid convolution, 2×2 max-pool) blocks."""
    return ((size - 4) // 2 - 4) // 2


class Mlp(nn.Module):
    """Fully connected network; ``hidden=(100,)`` is the thesis's MNIST DNN (784 → 100 → 10)."""

    head_prefixes = ("head.",)

    def __init__(self, in_shape: tuple[int, ...], n_classes: int, hidden: tuple[int, ...] = (100,)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(in_shape)
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.base = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        """Return class logits [B, n_classes]."""
        return self.head(self.base(x))


class LogisticRegression(Mlp):
    """Multinomial logistic regression: one linear layer (the whole model is the head)."""

    def __init__(self, in_shape: tuple[int, ...], n_classes: int):
        super().__init__(in_shape, n_classes, hidden=())


class CnnCifar(nn.Module):
    """The thesis's CIFAR-10 CNN (pFedMe's).

    Conv 5×5 (6) → pool → conv 5×5 (16) → pool → fully connected 400 → 120 → 84 → classes, ReLU
    after every layer but the last.
    """

    head_prefixes = ("head.",)

    def __init__(self, in_shape: tuple[int, ...], n_classes: int):
        super().__init__()
        channels, height, width = in_shape
        flat = 16 * _after_two_convs(height) * _after_two_convs(width)
        self.base = nn.Sequential(
            nn.Conv2d(channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        )
        self.head = nn.Linear(84, n_classes)

    def forward(self, x):
        """Return class logits [B, n_classes]."""
        return self.head(self.base(x))


class FedAvgCnn(nn.Module):
    """PFLlib's 4-layer "FedAvg CNN": conv 5×5 (32) → pool → conv 5×5 (64) → pool → fc → classes."""

    head_prefixes = ("head.",)

    def __init__(self, in_shape: tuple[int, ...], n_classes: int, hidden: int = 512):
        super().__init__()
        channels, height, width = in_shape
        flat = 64 * _after_two_convs(height) * _after_two_convs(width)
        self.base = nn.Sequential(
            nn.Conv2d(channels, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(flat, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        """Return class logits [B, n_classes]."""
        return self.head(self.base(x))


class Cnn6(nn.Module):
    """pFedVEM's 6-layer CNN (CIFAR-100, SUN397): five 3×3 convolutions, then the head.

    Convolutions of 32, 64, 128, 256 and 100 channels (padding 1, ReLU), a 2×2 max-pool (padding
    1) after each of the first four, global average pooling to 100 features → classes. Any image
    size of 2×2 or more.
    """

    head_prefixes = ("head.",)

    def __init__(self, in_shape: tuple[int, ...], n_classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_shape[0]
        for width in (32, 64, 128, 256):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(),
                       nn.MaxPool2d(2, padding=1)]
            channels = width
        layers += [nn.Conv2d(channels, 100, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                   nn.Flatten()]
        self.base = nn.Sequential(*layers)
        self.head = nn.Linear(100, n_classes)

    def forward(self, x):
        """Return class logits [B, n_classes]."""
        return self.head(self.base(x))
