"""One idea of a backbone for every trainer command of both frameworks (framework-free).

``--backbone SPEC`` names the network:
  - a named backbone of our model zoo (``conv4``, ``resnet18``, ``resnet50``, ``tiny``), random
    initial weights drawn from the command's seed;
  - ``module:callable``: a factory called with no arguments that returns the model;
  - a model file: TorchScript or ``.pt2`` (torch); a SavedModel directory, ``.keras`` or
    ``.h5`` (tf).
``--weights FILE`` loads a state dict (torch) / weights file (tf), or one of our own
trainer checkpoints, into it.

The model maps float images (NCHW in torch, NHWC in tf) to features [N, D]. What it
expects is declared once, by flags or by attributes on the model (``input_size``,
``input_range``, ``mean``, ``std``); the server serves images at the declared size, resized
as the protocol prescribes; the trainer maps uint8 [0, 255] linearly onto ``input_range``
and then subtracts ``mean`` and divides by ``std`` per channel.

A checkpoint has one input convention, the one it was trained with, so every command and
every protocol of a run (``evaluate``'s MD, VTAB and CoG alike) resolves the same one, each
value by the first of (``resolve_preprocessing``):
  1. the flags ``--input-range``, ``--mean``, ``--std``;
  2. the model's attributes ``input_range``, ``mean``, ``std``;
  3. what the backbone's kind or weights say (``Convention``): our named backbones, trained
     by our MD trainer, [-1, 1], mean 0, std 1 (Meta-Dataset's scaling), unless they hold
     torchvision weights (``TORCHVISION_CONVENTION``: ImageNet's mean and std on [0, 1]);
  4. the one default for a backbone that declares nothing (``DEFAULT_CONVENTION``, ImageNet's
     mean and std on [0, 1]).
No protocol has a default of its own: a protocol's convention is that of its own models,
not of the checkpoint evaluated. The resolved ``Preprocessing`` says whose values it holds
(``source``), which run configurations record and the first line of a run names.

A model whose output is not [N, D] floating point is refused at once (``check_features``)
with one line naming what it returned and what was expected.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from sampler_common.checks import check_image_size

from clients.errors import UsageError
from clients.flag_types import field_flag, int_at_least
from clients.trainer_options import OptionGroup, Record, Resume, option

# tiny: three stride-2 convolutions, 64 features (fast on CPU: tests and the demo)
MD_BACKBONES = ("md-conv4", "md-resnet18", "md-wrn", "md-relationnet-convnet")
"""Meta-Dataset's own backbones, as the reference defines them (``clients.torch.md_backbones``)."""
NAMED_BACKBONES = ("conv4", "resnet18", "resnet50", "tiny", *MD_BACKBONES)


def md_aligned_side(side: int) -> int:
    """The side ``md-resnet18`` resizes its input to first, as the reference's "DeepLab
    alignment": the next 32k + 1 at or above ``side`` (84 -> 97, 126 -> 129)."""
    return math.ceil(side / 32) * 32 + 1
CALLABLE_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
ATTRIBUTES = ("input_size", "input_range", "mean", "std")
# formats to nothing; its presence stops ArgumentDefaultsHelpFormatter adding a second "(default: None)"
HIDE_DEFAULT = "%(default).0s"


@dataclass(frozen=True)
class BackboneSpec:
    """What ``--backbone`` names: ``kind`` is 'named', 'callable' or 'file'; ``target`` the
    name, 'module:callable' or the file; ``weights`` the ``--weights`` file or None."""

    kind: str
    target: str
    weights: str | None = None

    def describe(self) -> str:
        return self.target + (f" + {self.weights}" if self.weights else "")


def classify_backbone(text: str) -> BackboneSpec:
    """The kind of ``--backbone`` text, or one line saying what is allowed."""
    if text in NAMED_BACKBONES:
        return BackboneSpec("named", text)
    if Path(text).exists():
        return BackboneSpec("file", text)
    if CALLABLE_PATTERN.match(text):
        return BackboneSpec("callable", text)
    raise argparse.ArgumentTypeError(
        f"got {text!r}, expected a named backbone ({', '.join(NAMED_BACKBONES)}), module:callable, or an existing "
        "model file (torch: TorchScript or .pt2; tf: a SavedModel directory, .keras or .h5)")


def backbone_text(text: str) -> str:
    """argparse type of ``--backbone``: the text itself, once it names something allowed."""
    classify_backbone(text)
    return text


def backbone_spec(args: argparse.Namespace) -> BackboneSpec:
    """The spec of a parsed command line (``--backbone`` and ``--weights``)."""
    spec = classify_backbone(args.backbone)
    return BackboneSpec(spec.kind, spec.target, args.weights)


def load_callable(target: str) -> Callable[..., Any]:
    """The object ``module:callable`` names (dotted attributes allowed), else one line."""
    module_name, _, attribute = target.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"argument --backbone: got {target!r}, which cannot be loaded ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:160]})") from None
    if not callable(value):
        raise UsageError(f"argument --backbone: got {target!r}, which names a {type(value).__name__}, not a callable")
    return value


# ---- what the model expects -------------------------------------------------------------------


class InputSource(enum.Enum):
    """Whose input convention a backbone gets (``Preprocessing.source``), strongest first."""

    FLAGS = "flags"
    ATTRIBUTES = "model attributes"
    TORCHVISION = "torchvision weights"
    NAMED = "named backbone"
    DEFAULT = "default"


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
"""torchvision's ImageNet statistics, on [0, 1] (the CoG reference normalises with them too)."""


@dataclass(frozen=True)
class Convention:
    """An input convention a backbone gets where neither flags nor its attributes say one."""

    source: InputSource
    input_range: tuple[float, float]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def attributes(self) -> dict[str, Any]:
        """As a model's attributes declare it."""
        return {"input_range": self.input_range, "mean": self.mean, "std": self.std}


NAMED_CONVENTION = Convention(InputSource.NAMED, (-1.0, 1.0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
"""Our named backbones': our MD trainer trains them on [-1, 1], mean 0, std 1 (Meta-Dataset's scaling)."""
TORCHVISION_CONVENTION = Convention(InputSource.TORCHVISION, (0.0, 1.0), IMAGENET_MEAN, IMAGENET_STD)
"""A named backbone holding torchvision's weights: torchvision trained them on ImageNet's statistics."""
DEFAULT_CONVENTION = Convention(InputSource.DEFAULT, (0.0, 1.0), IMAGENET_MEAN, IMAGENET_STD)
"""The one default for a backbone that declares nothing (a ``module:callable``, a model file), in
every command and protocol: ImageNet's mean and std on [0, 1], the convention of the pretrained
models users bring (torchvision's and timm's ResNets and ViTs, the checkpoints the CoG
reference evaluates). [-1, 1] is our own trainers' scaling, and our named backbones declare it
themselves; a checkpoint trained on it elsewhere says so with ``--input-range -1 1 --mean 0 0 0
--std 1 1 1`` or attributes."""


@dataclass(frozen=True)
class Preprocessing:
    """Served side ``size``; uint8 [0, 255] -> [low, high] linearly, then (x - mean) / std.
    ``source`` says whose values they are (``InputSource``' values; where values come from
    several: ``flags (mean), named backbone (input_range, std)``); equality, hashes and cache
    keys are of the numbers alone."""

    size: int
    low: float
    high: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str = field(default="", compare=False)

    @property
    def divisor(self) -> float:
        """x / divisor + low maps [0, 255] onto [low, high]; a division (not a multiplication by
        the reciprocal) so [-1, 1] is x / 127.5 - 1 and [0, 1] is x / 255 bit for bit."""
        return 255.0 / (self.high - self.low)

    @property
    def normalises(self) -> bool:
        return self.mean != (0.0, 0.0, 0.0) or self.std != (1.0, 1.0, 1.0)

    def to_float(self, images: np.ndarray) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, H, W, 3] as the model expects (NHWC; each framework
        does the same operations in the same order on its device, and tests compare to this)."""
        x = images.astype(np.float32) / np.float32(self.divisor) + np.float32(self.low)
        if self.normalises:
            x = (x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return x.astype(np.float32)

    def as_config(self) -> dict[str, Any]:
        return {"input_size": self.size, "input_range": [self.low, self.high], "mean": list(self.mean),
                "std": list(self.std), "source": self.source}

    def describe(self) -> str:
        """One line for a run's log: the numbers and whose they are."""
        numbers = (f"input {self.size} px: [{self.low:g}, {self.high:g}], mean {_shown(self.mean)}, "
                   f"std {_shown(self.std)}")
        if self.source == InputSource.DEFAULT.value:
            return (f"{numbers}, the default for a backbone that declares none (a checkpoint trained otherwise "
                    "declares input_range, mean and std, or takes --input-range, --mean, --std)")
        return f"{numbers}, declared by {self.source}"

    def key(self) -> str:
        """A stable text for cache keys."""
        return (f"{self.size}:{self.low!r},{self.high!r}:{','.join(map(repr, self.mean))}:"
                f"{','.join(map(repr, self.std))}")


def _shown(values: Sequence[float]) -> str:
    return " ".join(f"{v:g}" for v in values)


def convention_preprocessing(convention: Convention, size: int) -> Preprocessing:
    """``convention`` at side ``size``, as a backbone that declares nothing else gets it."""
    return Preprocessing(size, *convention.input_range, convention.mean, convention.std, convention.source.value)


def _triple(name: str, value: Any, positive: bool, source: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        values = ()
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or not all(math.isfinite(v) and (v > 0 or not positive) for v in values):
        allowed = "3 positive finite numbers" if positive else "3 finite numbers"
        raise UsageError(f"{source}: {name} got {value!r}, expected {allowed} (one per RGB channel) or one for all")
    return values  # type: ignore[return-value]


def _range(value: Any, source: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise UsageError(f"{source}: input_range got {value!r}, expected two numbers (low, high), "
                         "e.g. 0 1 or -1 1") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise UsageError(f"{source}: input_range got {value!r}, expected finite low < high")
    return low, high


def _sources(origins: dict[str, str]) -> str:
    """``Preprocessing.source`` of the values' origins (name -> ``InputSource`` value): the one
    origin, else each with its values, strongest first."""
    order = [source.value for source in InputSource]
    named = sorted(set(origins.values()), key=order.index)
    if len(named) == 1:
        return named[0]
    return ", ".join(f"{origin} ({', '.join(n for n, o in origins.items() if o == origin)})" for origin in named)


def resolve_preprocessing(args: argparse.Namespace, model: Any, default_size: int,
                          convention: Convention = DEFAULT_CONVENTION) -> Preprocessing:
    """Each value from the flags, else the model's declared attributes (``model`` None: it
    declares none), else ``convention``: what the backbone's kind or weights say
    (``NAMED_CONVENTION``, ``TORCHVISION_CONVENTION``) or the one default. The side: the flag,
    the attribute, else ``default_size`` (the command's). Sets ``args.image_size`` to the
    resolved side."""
    options = BackboneOptions.from_args(args)
    defaults = convention.attributes()
    declared = {name: getattr(model, name) for name in ATTRIBUTES if getattr(model, name, None) is not None}
    origins: dict[str, str] = {}  # range, mean, std -> whose (InputSource's value)

    def pick(name: str, flag: Any) -> tuple[Any, str, str]:
        if flag is not None:
            return flag, f"argument --{name.replace('_', '-')}", InputSource.FLAGS.value
        if name in declared:
            return declared[name], f"the backbone's {name} attribute", InputSource.ATTRIBUTES.value
        return defaults.get(name), f"the {convention.source.value} convention", convention.source.value

    size_value, size_source, _ = pick("input_size", options.image_size)
    size_source = "argument --image-size" if size_source.startswith("argument") else size_source
    if size_value is None:
        size_value = default_size
    try:
        size = int(size_value)
    except (TypeError, ValueError):
        size = -1
    if size < 8 or size != size_value:
        raise UsageError(f"{size_source}: input_size got {size_value!r}, expected an integer >= 8")
    value, source, origins["input_range"] = pick("input_range", options.input_range)
    low, high = _range(value, source)
    value, source, origins["mean"] = pick("mean", options.mean)
    mean = _triple("mean", value, False, source)
    value, source, origins["std"] = pick("std", options.std)
    std = _triple("std", value, True, source)
    args.image_size = size
    return Preprocessing(size, low, high, mean, std, _sources(origins))


@dataclass(frozen=True)
class LoadedBackbone:
    """A backbone ready to use: the framework's model (module, Keras model or callable), what
    it expects, its feature size, and the sha256 of its weights as loaded (which keys feature
    caches and says whether two runs started from the same network)."""

    spec: BackboneSpec
    model: Any
    preprocessing: Preprocessing
    out_dim: int
    fingerprint: str


class FeatureExtractor(Protocol):
    """What ``evaluate`` needs of a framework: frozen features of uint8 NHWC images."""

    backbone: LoadedBackbone

    def features(self, images: np.ndarray) -> np.ndarray:
        """uint8 [N, S, S, 3] -> float32 [N, D], inference mode, no gradient."""

    def episode_features(self, support: np.ndarray, query: np.ndarray,
                         batch_norm: str) -> tuple[np.ndarray, np.ndarray]:
        """(support, query) features of one episode under ``batch_norm`` (``clients.batch_norm``):
        ``running`` embeds them as ``features`` does; ``md`` and ``transductive`` embed them in
        one pass whose batch norms take the episode's moments, so a query's features depend on
        its episode's support set, as Meta-Dataset's learners embed an episode at test."""

    def episode_norms(self, batch_norm: str) -> int:
        """The backbone's batch norms that take an episode's moments under ``batch_norm``."""


# ---- what the model returns -------------------------------------------------------------------


def check_features(spec: BackboneSpec | str, shape: Sequence[int], dtype: str, rows: int) -> int:
    """The feature dimension D of an output of ``shape``/``dtype`` for ``rows`` images, or
    one line naming what the backbone returned and what was expected."""
    name = spec.target if isinstance(spec, BackboneSpec) else spec
    shape = tuple(int(s) for s in shape)
    dtype = str(dtype).replace("torch.", "").replace("<dtype: '", "").rstrip("'>")
    if len(shape) != 2 or shape[0] != rows or shape[1] < 1 or dtype not in FLOAT_DTYPES:
        raise UsageError(f"argument --backbone: {name} returned {dtype} {list(shape)} for {rows} images, expected "
                         f"floating-point features [{rows}, D] (flatten or pool them in the model)")
    return shape[1]


def describe_output(value: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of whatever a model returned; a non-tensor is its type name."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return (), type(value).__name__
    return tuple(int(s) for s in shape), str(dtype)


# ---- the command-line group -------------------------------------------------------------------


def _range_flag(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a finite number")
    return value


def _std_flag(text: str) -> float:
    value = _range_flag(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number")
    return value


def backbone_group(default: str | None, image_size_default: int | str, image_size_help: str,
                   backbone_record: Record = Record.RESULT) -> OptionGroup:
    """``--backbone``, ``--weights``, ``--init-seed``, ``--image-size``, ``--input-range``,
    ``--mean``, ``--std``: the same flags and meanings in every trainer command. A command
    gives its ``default`` backbone (None: required), the side used when neither the flag nor
    the backbone says one (``image_size_default``, as the help shows it) and how its run
    records ``--backbone`` (the cog command records the name it resolves instead). The input
    convention has no per-command default: ``resolve_preprocessing``'s order, in every command."""
    named, other = NAMED_CONVENTION, DEFAULT_CONVENTION  # torchvision weights' are the default's numbers
    unless = "for a named backbone without torchvision weights"
    both = ("transfer", "cog")  # evaluate hands every one on to the commands it runs
    return OptionGroup(
        "backbone",
        (option("--backbone", type=backbone_text, default=default, required=default is None, metavar="SPEC",
                record=backbone_record, resume=Resume.MODEL, forward=both,
                help=f"{', '.join(NAMED_BACKBONES)}; module:callable (a factory returning the model); or a model "
                     "file (torch: TorchScript, .pt2; tf: SavedModel directory, .keras, .h5)"
                     + (" (default: %(default)s)" if default else "")),
         # where the weights live: the trainers record their sha256 (backbone_sha256) instead
         option("--weights", default=None, metavar="FILE", record=Record.OPERATIONAL, resume=Resume.FREE,
                forward=both,
                help="weights loaded into the backbone: a state dict (torch) or weights file (tf), or one of our "
                     "trainer checkpoints (default: none, a named backbone starts from random weights)"
                     + HIDE_DEFAULT),
         option("--init-seed", type=int_at_least(0), default=None, metavar="S", record=Record.RESULT,
                resume=Resume.FREE, forward=both,
                help="a named backbone starts from the framework-neutral weights generated from S "
                     "(clients.init_weights): the same numbers in torch and tf (default: the framework's own "
                     "initialiser, seeded from the command's seed)" + HIDE_DEFAULT),
         option("--image-size", type=_size_flag, default=None, metavar="PIXELS", record=Record.RESULT,
                resume=Resume.MODEL, forward=both,
                help=f"{image_size_help} (default: the backbone's input_size, else {image_size_default})"
                     + HIDE_DEFAULT),
         option("--input-range", nargs=2, type=_range_flag, default=None, metavar=("LOW", "HIGH"),
                record=Record.RESULT, resume=Resume.FREE, forward=both,
                help="pixel values 0..255 are mapped linearly onto [LOW, HIGH] (default: the backbone's "
                     f"input_range; {_shown(named.input_range)} {unless}; else {_shown(other.input_range)})"
                     + HIDE_DEFAULT),
         option("--mean", nargs=3, type=_range_flag, default=None, metavar="M", record=Record.RESULT,
                resume=Resume.FREE, forward=both,
                help="per-channel mean subtracted after the range mapping, RGB (default: the backbone's mean; "
                     f"{_shown(named.mean)} {unless}; else {_shown(other.mean)})" + HIDE_DEFAULT),
         option("--std", nargs=3, type=_std_flag, default=None, metavar="S", record=Record.RESULT,
                resume=Resume.FREE, forward=both,
                help="per-channel standard deviation divided by, RGB (default: the backbone's std; "
                     f"{_shown(named.std)} {unless}; else {_shown(other.std)})" + HIDE_DEFAULT)),
        "the model maps float images to features [N, D]; what it expects is declared by these flags or by its "
        "attributes input_size, input_range, mean, std (a flag wins), else by the backbone: the same in every "
        "command and protocol")


@dataclass(frozen=True, kw_only=True)
class BackboneOptions:
    """The backbone group of a parsed command line (``backbone_group``), typed: ``from_args``
    reads every field by name, so a namespace that lacks one raises instead of defaulting."""

    backbone: str
    weights: str | None
    init_seed: int | None
    image_size: int | None
    input_range: Sequence[float] | None  # as given: checked when resolved (resolve_preprocessing)
    mean: Sequence[float] | None
    std: Sequence[float] | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BackboneOptions:
        return cls(backbone=args.backbone, weights=args.weights, init_seed=args.init_seed,
                   image_size=args.image_size, input_range=args.input_range, mean=args.mean, std=args.std)


_size_flag = field_flag(check_image_size, 8)
"""--image-size: a size every layer serves (``sampler_common.checks``), and at least 8 for a backbone."""


def check_backbone_group(parser: argparse.ArgumentParser, args: argparse.Namespace, image_size_default: int) -> None:
    """``--weights`` must exist and fit the kind of backbone; a named backbone's side is
    known at once (it declares none), so ``args.image_size`` is filled in for it here."""
    kind = classify_backbone(args.backbone).kind
    if args.weights is not None:
        if not Path(args.weights).exists() and not Path(args.weights + ".index").exists():  # tf checkpoint prefix
            parser.error(f"argument --weights: got {args.weights!r}, expected an existing weights file (a state "
                         "dict, Keras weights, or one of our trainer checkpoints)")
        if kind == "file":
            parser.error(f"argument --weights: got {args.weights!r}, but --backbone {args.backbone!r} is a model "
                         "file holding its own weights (--weights is for named and module:callable backbones)")
    if args.init_seed is not None:
        if kind != "named":
            parser.error(f"argument --init-seed: --backbone {args.backbone!r} is not a named backbone (the "
                         f"framework-neutral weights exist for {', '.join(NAMED_BACKBONES)})")
        if args.weights is not None:
            parser.error("argument --init-seed: not with --weights (both say where the weights come from)")
    if kind == "named" and args.image_size is None:
        args.image_size = image_size_default
