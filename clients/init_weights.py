"""Framework-neutral initial weights of our named backbones: the same numbers in torch and tf.

``neutral_weights(backbone, image_size, seed)`` draws every tensor of a named backbone
(``conv4``, ``resnet18``, ``resnet50``, ``tiny``) with NumPy alone, so ``--init-seed S``
starts the torch and the tf model from identical weights and their results can be
compared. One canonical layout: torch's ``state_dict`` names and layouts (convolution
[out, in, kh, kw], linear [out, in], batch norm ``weight``/``bias``/``running_mean``/
``running_var``/``num_batches_tracked``); each ``Tensor`` also names the Keras layer of
``clients.tf.models`` that holds it, and ``clients.tf.backbones`` transposes on loading.

Determinism: tensor ``name`` is drawn from ``RandomState(derive_seed(seed, "init", name))``.
The legacy ``RandomState`` is the NumPy generator whose outputs are frozen across releases
(NEP 19), and a generator per name means a tensor's values depend on (seed, name) alone,
not on which tensors come before it. Tests pin a digest of known weights.

Distributions: those our torch models use, so that a run with ``--init-seed`` starts from
a draw of the same distribution as a torch run without it:
  - ``conv4`` and ``tiny``: torch's default for ``nn.Conv2d`` (Kaiming uniform with
    a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)); a bias from the same bound);
  - ``resnet18`` and ``resnet50``: He (Kaiming) normal, fan-out mode, ReLU gain,
    N(0, 2 / fan_out), as torchvision's ResNets (and ours) re-initialise their convolutions;
  - the ``md-*`` backbones: Meta-Dataset's ``weight_variable``, N(0, 0.1^2) truncated at two
    deviations (values beyond drawn again, as TensorFlow's ``truncated_normal``);
  - batch norm: weight 1, bias 0, running mean 0, running variance 1, no batches tracked;
  - a linear head (``neutral_head``): torch's default for ``nn.Linear``, the same uniform bound.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients.flag_types import int_at_least
from clients.md_learners import RELATION_DEPTH, RELATION_HIDDEN, relation_pooled_side
from clients.seeds import derive_seed

BACKBONES = ("conv4", "resnet18", "resnet50", "tiny", "md-conv4", "md-resnet18", "md-wrn", "md-relationnet-convnet")
BATCH_NORM_PARTS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
# the part of a torch tensor name -> the Keras variable it becomes
KERAS_VARIABLES = {"conv.weight": "kernel", "conv.bias": "bias", "linear.weight": "kernel", "linear.bias": "bias",
                   "bn.weight": "gamma", "bn.bias": "beta", "bn.running_mean": "moving_mean",
                   "bn.running_var": "moving_variance"}


@dataclass(frozen=True)
class Tensor:
    """One tensor of a backbone: its torch ``name`` and ``shape``, what it is (``kind``:
    'conv', 'bn' or 'linear'; ``part``: weight, bias, running_mean, ...), how it is drawn
    (``init``: 'uniform' (torch's default), 'he_normal', or a constant), and the Keras
    layer (``keras_layer``) of ``clients.tf.models`` that holds it."""

    name: str
    shape: tuple[int, ...]
    kind: str
    part: str
    init: str
    keras_layer: str

    @property
    def keras_variable(self) -> str | None:
        """The Keras variable name (kernel, gamma, moving_variance, ...), None where tf has
        none (``num_batches_tracked``)."""
        return KERAS_VARIABLES.get(f"{self.kind}.{self.part}")


def _conv(name: str, out: int, inp: int, kernel: int, init: str, keras_layer: str, bias: bool = False) -> list[Tensor]:
    tensors = [Tensor(f"{name}.weight", (out, inp, kernel, kernel), "conv", "weight", init, keras_layer)]
    if bias:
        tensors.append(Tensor(f"{name}.bias", (out,), "conv", "bias", "uniform", keras_layer))
    return tensors


def _bn(name: str, channels: int, keras_layer: str) -> list[Tensor]:
    return [Tensor(f"{name}.{part}", () if part == "num_batches_tracked" else (channels,), "bn", part, part,
                   keras_layer) for part in BATCH_NORM_PARTS]


def _conv4(init: str = "uniform") -> list[Tensor]:
    """``conv4``; ``md-conv4`` is the same with MD's truncated-normal kernels."""
    tensors: list[Tensor] = []
    channels = 3
    for block in range(4):
        tensors += _conv(f"features.{4 * block}", 64, channels, 3, init, f"block{block}_conv")
        tensors += _bn(f"features.{4 * block + 1}", 64, f"block{block}_bn")
        channels = 64
    return tensors


def _resnet18(init: str = "he_normal", project_every_stage: bool = False) -> list[Tensor]:
    """``resnet18`` (a projection where the width changes); ``md-resnet18`` draws its kernels
    from MD's truncated normal and projects in every stage's first block."""
    tensors = _conv("stem.0", 64, 3, 7, init, "stem_conv") + _bn("stem.1", 64, "stem_bn")
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            index, keras = 2 * stage + block, f"stage{stage}_{block}"
            tensors += _conv(f"blocks.{index}.conv1", width, channels, 3, init, f"{keras}_a_conv")
            tensors += _bn(f"blocks.{index}.bn1", width, f"{keras}_a_bn")
            tensors += _conv(f"blocks.{index}.conv2", width, width, 3, init, f"{keras}_b_conv")
            tensors += _bn(f"blocks.{index}.bn2", width, f"{keras}_b_bn")
            if channels != width or (project_every_stage and block == 0):
                tensors += _conv(f"blocks.{index}.shortcut.0", width, channels, 1, init, f"{keras}_down_conv")
                tensors += _bn(f"blocks.{index}.shortcut.1", width, f"{keras}_down_bn")
            channels = width
    return tensors


def _resnet50() -> list[Tensor]:
    tensors = _conv("conv1", 64, 3, 7, "he_normal", "stem_conv") + _bn("bn1", 64, "stem_bn")
    channels = 64
    for stage, (count, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for block in range(count):
            name, keras = f"layer{stage + 1}.{block}", f"stage{stage}_{block}"
            inputs = channels
            for step, (out, kernel, letter) in enumerate(((width, 1, "a"), (width, 3, "b"), (width * 4, 1, "c"))):
                tensors += _conv(f"{name}.conv{step + 1}", out, inputs, kernel, "he_normal", f"{keras}_{letter}_conv")
                tensors += _bn(f"{name}.bn{step + 1}", out, f"{keras}_{letter}_bn")
                inputs = out
            if block == 0:  # a stride or a change of width: the projection shortcut
                tensors += _conv(f"{name}.downsample.0", width * 4, channels, 1, "he_normal", f"{keras}_down_conv")
                tensors += _bn(f"{name}.downsample.1", width * 4, f"{keras}_down_bn")
            channels = width * 4
    return tensors


def _tiny() -> list[Tensor]:
    tensors: list[Tensor] = []
    channels = 3
    for block, width in enumerate((16, 32, 64)):
        tensors += _conv(f"body.{2 * block}", width, channels, 3, "uniform", f"block{block}_conv", bias=True)
        channels = width
    return tensors


def _md_wrn() -> list[Tensor]:
    tensors = _conv("stem", 16, 3, 3, "trunc_normal", "stem_conv")
    channels = 16
    for group, width in enumerate((32, 64, 128)):
        for block in range(2):
            index, keras = 2 * group + block, f"group{group}_{block}"
            tensors += _bn(f"blocks.{index}.bn1", channels, f"{keras}_bn1")
            tensors += _conv(f"blocks.{index}.conv1", width, channels, 3, "trunc_normal", f"{keras}_conv1")
            tensors += _bn(f"blocks.{index}.bn2", width, f"{keras}_bn2")
            tensors += _conv(f"blocks.{index}.conv2", width, width, 3, "trunc_normal", f"{keras}_conv2")
            tensors += _conv(f"blocks.{index}.shortcut", width, channels, 1, "trunc_normal", f"{keras}_shortcut")
            channels = width
    return tensors + _bn("final_bn", channels, "final_bn")


def _md_relationnet_convnet() -> list[Tensor]:
    tensors: list[Tensor] = []
    channels = 3
    for block in range(4):
        conv, bn = (4 * block, 4 * block + 1) if block < 3 else (12, 13)
        tensors += _conv(f"features.{conv}", 64, channels, 3, "trunc_normal", f"block{block}_conv")
        tensors += _bn(f"features.{bn}", 64, f"block{block}_bn")
        channels = 64
    return tensors


_LAYOUTS = {"conv4": _conv4, "resnet18": _resnet18, "resnet50": _resnet50, "tiny": _tiny,
            "md-conv4": lambda: _conv4("trunc_normal"),
            "md-resnet18": lambda: _resnet18("trunc_normal", project_every_stage=True), "md-wrn": _md_wrn,
            "md-relationnet-convnet": _md_relationnet_convnet}
_LEAST_SIDE = {"conv4": 16, "md-conv4": 16, "md-relationnet-convnet": 22}


def layout(backbone: str, image_size: int) -> list[Tensor]:
    """Every tensor of ``backbone`` in torch's ``state_dict`` order (the weights do not depend
    on ``image_size``; it is checked as the models check it)."""
    if backbone not in _LAYOUTS:
        raise ValueError(f"backbone: got {backbone!r}, expected one of {', '.join(BACKBONES)}")
    least = _LEAST_SIDE.get(backbone, 8)
    if image_size < least:
        raise ValueError(f"image_size: got {image_size}, the {backbone} backbone needs at least {least}")
    return _LAYOUTS[backbone]()


# ---- what a weights file looks like: the named backbone its names or shapes match -----------------

LAYOUT_SIDE = 224
"""Any side the layouts accept: no named backbone's tensors depend on it."""


def _comparable_names(names: Iterable[str]) -> frozenset[str]:
    """State-dict names as a named backbone's layout lists them: DDP's ``module.`` prefix, a
    classifier ``fc.*`` and batch norm's ``num_batches_tracked`` (no weight) left out."""
    names = list(names)
    if names and all(name.startswith("module.") for name in names):
        names = [name[len("module."):] for name in names]
    return frozenset(name for name in names if not name.startswith("fc.") and not name.endswith("num_batches_tracked"))


def backbone_of_names(names: Iterable[str]) -> str | None:
    """The named backbone (``BACKBONES``) whose state-dict names ``names`` are, else None:
    what a ``--weights`` file that does not fit holds, so its refusal can name the flag to change."""
    given = _comparable_names(names)
    for backbone in BACKBONES:
        if given == _comparable_names(t.name for t in layout(backbone, LAYOUT_SIDE)):
            return backbone
    return None


def keras_shape(tensor: Tensor) -> tuple[int, ...]:
    """The shape of ``tensor``'s Keras variable: a convolution's [out, in, kh, kw] as
    [kh, kw, in, out], a linear [out, in] as [in, out] (``clients.tf.backbones.keras_value``)."""
    if tensor.kind == "conv" and len(tensor.shape) == 4:
        out, inp, kh, kw = tensor.shape
        return (kh, kw, inp, out)
    if tensor.kind == "linear" and len(tensor.shape) == 2:
        return (tensor.shape[1], tensor.shape[0])
    return tensor.shape


def backbone_of_keras_shapes(shapes: Iterable[tuple[int, ...]]) -> str | None:
    """The named backbone whose Keras variables have exactly these shapes (in any order), else
    None: Keras weights files and tf checkpoints keep shapes, not torch's names."""
    given = sorted(tuple(int(d) for d in shape) for shape in shapes)
    for backbone in BACKBONES:
        if given == sorted(keras_shape(t) for t in layout(backbone, LAYOUT_SIDE) if t.keras_variable is not None):
            return backbone
    return None


def what_to_change(matched: str | None, backbone: str, what: str = "keys") -> str:
    """The advice of a refused ``--weights`` file whose ``what`` (its keys, or a Keras file's
    arrays) match the named backbone ``matched`` (None: none), given ``--backbone backbone``:
    which flag to change."""
    if matched is None:
        return (f"its {what} match no named backbone ({', '.join(BACKBONES)}): pass the model they were saved from "
                "as --backbone module:callable")
    if matched == backbone:
        return f"its {what} match {matched}, but not every value fits it"
    return f"its {what} match {matched}: use --backbone {matched}"


def draw(tensor: Tensor, seed: int, weight_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The values of ``tensor`` for ``seed`` (``weight_shape``: the shape of the weight a bias
    belongs to, whose fan-in bounds it; the tensor's own shape for a weight)."""
    if tensor.init == "num_batches_tracked":
        return np.zeros((), np.int64)
    constants = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}
    if tensor.kind == "bn":
        return np.full(tensor.shape, constants[tensor.init], np.float32)
    if tensor.init == "md_bias":  # MD's bias_variable
        return np.full(tensor.shape, 0.1, np.float32)
    state = np.random.RandomState(derive_seed(seed, "init", tensor.name))
    fan_shape = weight_shape or tensor.shape
    if tensor.init == "trunc_normal":  # MD's kernels: N(0, 0.1^2), values beyond 2 deviations drawn again
        values = state.standard_normal(tensor.shape)
        outside = np.abs(values) > 2.0
        while outside.any():
            values[outside] = state.standard_normal(int(outside.sum()))
            outside = np.abs(values) > 2.0
        values = values * 0.1
    elif tensor.init == "he_normal":  # N(0, 2 / fan_out), fan_out = out * kh * kw
        fan_out = fan_shape[0] * int(np.prod(fan_shape[2:]))
        values = state.standard_normal(tensor.shape) * math.sqrt(2.0 / fan_out)
    else:  # torch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the weight and its bias
        bound = 1.0 / math.sqrt(int(np.prod(fan_shape[1:])))  # fan_in = in * kh * kw
        values = state.uniform(-bound, bound, tensor.shape)
    return values.astype(np.float32)


def _draw_all(tensors: list[Tensor], seed: int) -> dict[str, np.ndarray]:
    weights = {t.name[: -len(".weight")]: t.shape for t in tensors if t.part == "weight" and t.kind != "bn"}
    return {t.name: draw(t, seed, weights.get(t.name[: -len(".bias")]) if t.part == "bias" else None)
            for t in tensors}


def neutral_weights(backbone: str, image_size: int, seed: int) -> dict[str, np.ndarray]:
    """The initial weights of ``backbone`` for ``seed``: torch ``state_dict`` names and layouts,
    float32 (``num_batches_tracked``: int64 0), in the state dict's order."""
    return _draw_all(layout(backbone, image_size), seed)


def head_layout(in_dim: int, num_classes: int, keras_layer: str = "logits") -> list[Tensor]:
    """The tensors of a linear head (torch ``LinearHead``'s ``linear``; Keras ``Dense``)."""
    return [Tensor("linear.weight", (num_classes, in_dim), "linear", "weight", "uniform", keras_layer),
            Tensor("linear.bias", (num_classes,), "linear", "bias", "uniform", keras_layer)]


def neutral_head(in_dim: int, num_classes: int, seed: int) -> dict[str, np.ndarray]:
    """A linear head's initial weights for ``seed`` (torch layout: weight [classes, in_dim]).
    Over conv4's flattened features the rows are in torch's (C, H, W) order;
    ``chw_to_hwc_rows`` reorders them for tf's (H, W, C) flatten."""
    return _draw_all(head_layout(in_dim, num_classes), seed)


def relation_layout(channels: int, side: int) -> list[Tensor]:
    """The tensors of RelationNet's relation module over a map of ``channels`` x ``side`` x
    ``side`` (torch ``RelationModule``; Keras layers of the same names): Meta-Dataset's
    ``weight_variable`` kernels, ``bias_variable``'s 0.1 biases, batch-norm scale 1 and offset 0."""
    depth, pooled = RELATION_DEPTH, relation_pooled_side(side)
    tensors = _conv("conv1", depth, 2 * channels, 3, "trunc_normal", "relation_conv1")
    tensors += [Tensor(f"bn1.{part}", (depth,), "bn", part, part, "relation_bn1") for part in ("weight", "bias")]
    tensors += _conv("conv2", depth, depth, 3, "trunc_normal", "relation_conv2")
    tensors += [Tensor(f"bn2.{part}", (depth,), "bn", part, part, "relation_bn2") for part in ("weight", "bias")]
    for name, out, inp in (("fc1", RELATION_HIDDEN, depth * pooled * pooled), ("fc2", 1, RELATION_HIDDEN)):
        tensors += [Tensor(f"{name}.weight", (out, inp), "linear", "weight", "trunc_normal", f"relation_{name}"),
                    Tensor(f"{name}.bias", (out,), "linear", "bias", "md_bias", f"relation_{name}")]
    return tensors


def neutral_relation(channels: int, side: int, seed: int) -> dict[str, np.ndarray]:
    """The relation module's initial weights for ``seed`` (torch names and layouts; fc1's
    columns over torch's (C, H, W) flatten: ``chw_to_hwc_rows`` for tf's)."""
    return _draw_all(relation_layout(channels, side), seed)


def chw_to_hwc_rows(weight: np.ndarray, channels: int, side: int) -> np.ndarray:
    """A [classes, C*H*W] weight over torch's NCHW flatten as the same function of tf's NHWC
    flatten: its columns permuted to (H, W, C) order."""
    classes = weight.shape[0]
    return weight.reshape(classes, channels, side, side).transpose(0, 2, 3, 1).reshape(classes, -1)


# ---- the file ------------------------------------------------------------------------------------


def write_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """An uncompressed ``.npz`` of ``arrays`` keyed by name, in the given order."""
    with open(path, "wb") as handle:
        np.savez(handle, **{name: np.asarray(value) for name, value in arrays.items()})


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file by name (no pickled objects), or one line saying why not."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name]) for name in data.files}
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{path}: not a NumPy .npz archive of arrays ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:160]})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clients.init_weights",
                                     description="write a named backbone's framework-neutral initial weights "
                                                 "(.npz, torch's names and layouts) for a seed; both frameworks "
                                                 "load it with --weights")
    parser.add_argument("--backbone", required=True, choices=BACKBONES)
    parser.add_argument("--image-size", type=int, default=84, metavar="PIXELS",
                        help="the side the backbone is built for (checked only; default: %(default)s)")
    parser.add_argument("--seed", type=int_at_least(0), required=True, metavar="S")
    parser.add_argument("--out", required=True, metavar="FILE.npz")
    args = parser.parse_args(argv)
    try:
        arrays = neutral_weights(args.backbone, args.image_size, args.seed)
    except ValueError as error:
        parser.error(f"argument --image-size: {error}")
    write_npz(args.out, arrays)
    print(f"{args.out}: {args.backbone}, seed {args.seed}, {len(arrays)} tensors "
          f"({sum(a.size for a in arrays.values()):,} values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
