"""Meta-Dataset's episode batch norm written out in NumPy float64, as the reference computes
it (google-research/meta-dataset ``models/functional_backbones.py`` ``bn``; facts in
../shared/reference/md_learners.md, section 2): a backbone pass over the support set alone
takes each batch norm's moments from its input (mean and biased variance over the rows and
the spatial axes) and returns them; a pass over the query set alone with ``moments`` given
normalises with those (``transductive``: the query's own pass takes its own). Nothing here
shares code with ``clients``: the conv4 and ResNet-18 of ``clients.torch.models`` are
re-derived from their state dicts (NCHW, torch's names), unpadded, one set at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

EPS = 1e-5


def conv2d(x: np.ndarray, kernel: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW cross-correlation with OIHW weights, zero padding on every side."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    size = kernel.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, kernel, optimize=True)


def max_pool(x: np.ndarray, size: int, stride: int, pad: int = 0) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(2, 3))[:, :, ::stride, ::stride]
    return windows.max(axis=(4, 5))


class BatchNorms:
    """The batch norms of one pass, in call order: with ``given`` moments (a support pass's
    ``taken``) each normalises by the next of them; otherwise by its input's own, recorded."""

    def __init__(self, weights: Mapping[str, np.ndarray], given: list[tuple[np.ndarray, np.ndarray]] | None) -> None:
        self.weights = weights
        self.given: Iterator[tuple[np.ndarray, np.ndarray]] | None = iter(given) if given is not None else None
        self.taken: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, x: np.ndarray, name: str) -> np.ndarray:
        if self.given is not None:
            mean, variance = next(self.given)
        else:
            mean, variance = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        self.taken.append((mean, variance))
        scale = self.weights[f"{name}.weight"] / np.sqrt(variance + EPS)
        shift = self.weights[f"{name}.bias"] - mean * scale
        return x * scale[None, :, None, None] + shift[None, :, None, None]


def conv4(x: np.ndarray, w: Mapping[str, np.ndarray], bn: BatchNorms) -> np.ndarray:
    for block in range(4):
        x = conv2d(x, w[f"features.{4 * block}.weight"], 1, 1)
        x = np.maximum(bn(x, f"features.{4 * block + 1}"), 0.0)
        x = max_pool(x, 2, 2)
    return x.reshape(len(x), -1)


def resnet18(x: np.ndarray, w: Mapping[str, np.ndarray], bn: BatchNorms) -> np.ndarray:
    x = np.maximum(bn(conv2d(x, w["stem.0.weight"], 2, 3), "stem.1"), 0.0)
    x = max_pool(x, 3, 2, 1)
    for block in range(8):
        name = f"blocks.{block}"
        stride = 2 if block in (2, 4, 6) else 1
        out = np.maximum(bn(conv2d(x, w[f"{name}.conv1.weight"], stride, 1), f"{name}.bn1"), 0.0)
        out = bn(conv2d(out, w[f"{name}.conv2.weight"], 1, 1), f"{name}.bn2")
        shortcut = x
        if f"{name}.shortcut.0.weight" in w:
            shortcut = bn(conv2d(x, w[f"{name}.shortcut.0.weight"], stride, 0), f"{name}.shortcut.1")
        x = np.maximum(out + shortcut, 0.0)
    return x.mean(axis=(2, 3))


BACKBONES = {"conv4": conv4, "resnet18": resnet18}


def episode_embeddings(backbone: str, weights: Mapping[str, np.ndarray], support: np.ndarray, query: np.ndarray,
                       mode: str) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """(support embeddings, query embeddings, the support pass's moments) of float64 NCHW
    inputs: the support pass takes its own moments; the query pass the support's (``md``) or
    its own (``transductive``)."""
    forward = BACKBONES[backbone]
    support_norms = BatchNorms(weights, None)
    support_embedded = forward(support, weights, support_norms)
    query_norms = BatchNorms(weights, support_norms.taken if mode == "md" else None)
    return support_embedded, forward(query, weights, query_norms), support_norms.taken
