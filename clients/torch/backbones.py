"""The backbone contract (``clients.backbone_contract``) in PyTorch: one loader for every
torch command (MD training and evaluation, ``transfer``, ``cog``, ``evaluate``).

``load_backbone`` turns ``--backbone`` / ``--weights`` / the preprocessing flags into a
``LoadedBackbone``:
  - a named backbone (``clients.torch.models``), its random initial weights drawn from
    the command's seed and a name (``clients.seeds.backbone_seed``), declaring Meta-Dataset's
    scaling ([-1, 1], mean 0, std 1) as attributes (``NAMED_CONVENTION``), or ImageNet's
    statistics on [0, 1] once it holds torchvision's weights (``TORCHVISION_CONVENTION``);
  - ``module:callable``: the factory is called with no arguments (under the same seeded
    generator) and returns an ``nn.Module`` or any callable on NCHW float tensors;
  - a TorchScript file (``torch.jit.save``) or a ``.pt2`` exported program (``torch.export``);
then ``--weights`` (named and ``module:callable`` backbones): a plain state dict, our MD
trainer's ``checkpoint.pt`` (its backbone), a ``{"state_dict": ...}`` / ``{"model": ...}``
wrapper, keys prefixed ``module.`` (DDP), a classifier ``fc.*`` the backbone lacks, or a
torchvision ResNet-18 state dict (renamed to our ``resnet18``'s layers; ``torchvision_layout``
says which files are torchvision's), or a framework-neutral ``.npz`` (``clients.init_weights``: a
state dict's names and layouts in NumPy arrays).
``--init-seed S`` starts a named backbone from ``neutral_weights(name, side, S)``, the
numbers tf starts from with the same flag. A file that does not fit is refused with one
line naming what it holds (the named backbone its keys match, or "not a state dict"),
the flag to change (``--backbone resnet50``) and what the backbone expected.

The model is probed once (2 images at the resolved size, eval mode) for its feature size;
a wrong output ([N, D, 1], integers, a tuple) is refused there with ``check_features``'s
line, before any data is asked for. The fingerprint is the sha256 of the weights as
loaded (names, dtypes, shapes and bytes in key order), which keys feature caches.

``to_model_input`` is the one place uint8 images become the model's input: the same
operations, in the same order, as ``Preprocessing.to_float``; ``TorchFeatures`` is the
``FeatureExtractor`` of ``evaluate``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import re
import textwrap
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from clients.backbone_contract import (DEFAULT_CONVENTION, NAMED_CONVENTION, TORCHVISION_CONVENTION, BackboneSpec,
                                       LoadedBackbone, Preprocessing, backbone_spec, check_features,
                                       convention_preprocessing, describe_output, load_callable,
                                       resolve_preprocessing)
from clients.errors import UsageError
from clients.feed import Feed
from clients.init_weights import backbone_of_names, neutral_weights, read_npz, what_to_change
from clients.seeds import backbone_seed
from clients.batch_norm import EPISODE_MOMENTS, check_batch_norm
from clients.trainer_args import PRECISIONS
from clients.torch.models import ResNet18, adopt_batch_norms, build_backbone, episode_norm
from clients.torch.graphed import GraphedForward, ShapeGraphs
from clients.torch.staging import Stager

PROBE_ROWS = 2
RECEIVED_AHEAD = 3  # batches ``features_stream`` holds received before they are staged
IN_FLIGHT = 3  # batches ``features_stream`` keeps queued on the device before it waits for the oldest
CHECKPOINT_FORMAT = 2  # the MD trainer's checkpoint.pt layout (written by clients.torch.md_train, read by --weights)
_TORCHVISION_BLOCK = re.compile(r"^layer([1-4])\.([01])\.(.*)$")
_TORCHVISION_DEPTHS = {("basic", (2, 2, 2, 2)): "ResNet-18", ("basic", (3, 4, 6, 3)): "ResNet-34",
                       ("bottleneck", (3, 4, 6, 3)): "ResNet-50", ("bottleneck", (3, 4, 23, 3)): "ResNet-101",
                       ("bottleneck", (3, 8, 36, 3)): "ResNet-152"}


# ---- building -----------------------------------------------------------------------------


def _build_named(spec: BackboneSpec, args: argparse.Namespace, default_size: int, seed_name: str) -> nn.Module:
    size = resolve_preprocessing(args, None, default_size, NAMED_CONVENTION).size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(backbone_seed(args.seed, seed_name, spec.target))
        try:
            model = build_backbone(spec.target, size)
        except ValueError as error:  # e.g. conv4 below 16 px
            raise UsageError(f"argument --image-size: {error}") from None
    init_seed = args.init_seed
    if init_seed is not None:  # the framework-neutral weights, the same numbers as tf's
        model.load_state_dict({name: torch.from_numpy(value)
                               for name, value in neutral_weights(spec.target, size, init_seed).items()})
    _declare(model, NAMED_CONVENTION.attributes())
    return model


def _declare(model: nn.Module, values: Mapping[str, Any]) -> None:
    """A named backbone's convention as its attributes (a TorchScript of it keeps them)."""
    for name, value in values.items():
        setattr(model, name, value)


def _build_callable(spec: BackboneSpec, args: argparse.Namespace, seed_name: str) -> Any:
    factory = load_callable(spec.target)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(backbone_seed(args.seed, seed_name, spec.target))
        try:
            model = factory()
        except TypeError as error:
            raise UsageError(f"argument --backbone: {spec.target}() failed ({' '.join(str(error).split())}); "
                             "expected a factory called with no arguments that returns the model") from None
    if not callable(model):
        raise UsageError(f"argument --backbone: {spec.target}() returned a {type(model).__name__}, expected an "
                         "nn.Module or a callable mapping NCHW float images to features [N, D]")
    return model


def _load_file(spec: BackboneSpec) -> Any:
    exported = spec.target.endswith(".pt2")
    try:
        if exported:  # an ExportedProgram runs in the mode it was exported in
            return torch.export.load(spec.target).module()
        return torch.jit.load(spec.target, map_location="cpu")
    except Exception as error:  # not a TorchScript archive / exported program
        kind = "an exported program (torch.export.save)" if exported else "a TorchScript file (torch.jit.save)"
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(f"argument --backbone: got {spec.target!r}, expected {kind} ({type(error).__name__}: "
                         f"{reason[:160]}{'...' if len(reason) > 160 else ''})") from None


# ---- --weights -------------------------------------------------------------------------------


def architecture(names: list[str]) -> str | None:
    """The architecture a state dict's key names look like, where we know it."""
    keys = set(names)
    if "layer4.0.conv1.weight" in keys:
        kind = "bottleneck" if "layer1.0.conv3.weight" in keys else "basic"
        depths = []
        for layer in range(1, 5):
            blocks = {int(m.group(1)) for m in (re.match(rf"^layer{layer}\.(\d+)\.", k) for k in keys) if m}
            depths.append(max(blocks) + 1 if blocks else 0)
        return f"torchvision's {_TORCHVISION_DEPTHS.get((kind, tuple(depths)), f'ResNet with {kind} blocks {depths}')}"
    if "stem.0.weight" in keys and "blocks.7.conv2.weight" in keys:
        return "our resnet18"
    if "features.12.weight" in keys and "features.13.running_var" in keys:
        return "our conv4"
    if "body.0.weight" in keys and "body.4.weight" in keys:
        return "our tiny"
    return None


def describe_state(state: Mapping[str, torch.Tensor]) -> str:
    """One phrase: how many tensors, what they look like (architecture, first names)."""
    names = list(state)
    values = sum(int(t.numel()) for t in state.values())
    looks = architecture(names)
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (f"{len(names)} tensors ({values:,} values)" + (f", like {looks}" if looks else "")
            + (f": {shown}" if names else ""))


def torchvision_layout(names: Iterable[str]) -> bool:
    """Whether a state dict of these key names is torchvision's: its ResNet-18's names (ours
    differ), or a torchvision ResNet's names with its classifier ``fc`` (our ``resnet50`` shares
    torchvision's names, not the classifier). A ResNet-50 state dict without ``fc`` could be
    either; it is read as ours."""
    names = [name.removeprefix("module.") for name in names]
    looks = architecture(names) or ""
    return looks == "torchvision's ResNet-18" or (looks.startswith("torchvision's") and "fc.weight" in names)


def from_torchvision(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A torchvision ResNet-18 state dict under our ``ResNet18``'s names (its ``fc`` dropped)."""
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("fc."):
            continue
        key = key.replace("conv1.", "stem.0.", 1) if key.startswith("conv1.") else key
        key = key.replace("bn1.", "stem.1.", 1) if key.startswith("bn1.") else key
        match = _TORCHVISION_BLOCK.match(key)
        if match:
            index = 2 * (int(match.group(1)) - 1) + int(match.group(2))
            key = f"blocks.{index}.{match.group(3).replace('downsample.', 'shortcut.')}"
        renamed[key] = value
    return renamed


def _tensors(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())


def weights_state(raw: Any, path: str) -> tuple[dict[str, torch.Tensor], str]:
    """(the state dict a weights file holds, what the file is) or one line."""
    allowed = ("a state dict (name -> tensor), a {'state_dict': ...} or {'model': ...} wrapper, or our MD "
               "trainer's checkpoint.pt")
    if isinstance(raw, Mapping) and "format" in raw and isinstance(raw.get("backbone"), Mapping):
        if raw["format"] != CHECKPOINT_FORMAT:
            raise UsageError(f"argument --weights: {path} is an MD trainer checkpoint of format {raw['format']!r}, "
                             f"expected format {CHECKPOINT_FORMAT}")
        return dict(raw["backbone"]), "our MD trainer's checkpoint"
    for wrapper in ("state_dict", "model"):
        if isinstance(raw, Mapping) and _tensors(raw.get(wrapper)):
            return dict(raw[wrapper]), f"a {{{wrapper!r}: ...}} checkpoint"
    if _tensors(raw):
        return dict(raw), "a state dict"
    held = (f"a {type(raw).__name__} of keys {', '.join(map(str, list(raw)[:4]))}" if isinstance(raw, Mapping)
            else f"a {type(raw).__name__}")
    raise UsageError(f"argument --weights: {path} is not a state dict (it holds {held}); expected {allowed}")


def adapt_state(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """Layouts we translate: DDP's ``module.`` prefix, a classifier ``fc.*`` the backbone
    lacks, torchvision ResNet-18 names for our ``resnet18``."""
    expected = model.state_dict()
    if all(k.startswith("module.") for k in state) and not any(k.startswith("module.") for k in expected):
        state = {k[len("module."):]: v for k, v in state.items()}
    if isinstance(model, ResNet18) and architecture(list(state)) == "torchvision's ResNet-18":
        return from_torchvision(state)
    if not any(k.startswith("fc.") for k in expected):
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    return state


def mismatch(given: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> str | None:
    """What keeps ``given`` out of a model whose state dict is ``expected`` (None: it fits)."""
    for key, value in given.items():
        if key in expected and tuple(value.shape) != tuple(expected[key].shape):
            return f"{key} is {list(value.shape)} there, {list(expected[key].shape)} expected"
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    parts = []
    if missing:
        parts.append(f"{len(missing)} of the backbone's tensors missing (first {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} it does not have (first {unexpected[0]})")
    return "; ".join(parts) or None


def _read_neutral(path: str) -> dict[str, torch.Tensor]:
    """A framework-neutral ``.npz`` (``clients.init_weights``) as a state dict, or one line."""
    try:
        return {name: torch.from_numpy(value) for name, value in read_npz(path).items()}
    except ValueError as error:
        raise UsageError(f"argument --weights: {error}") from None


def load_weights(model: Any, spec: BackboneSpec) -> bool:
    """Load ``--weights`` into ``model`` (strict), or one line saying why it does not fit;
    whether the weights were torchvision's (``torchvision_layout``; never our MD trainer's
    checkpoint)."""
    path = str(spec.weights)
    if not isinstance(model, nn.Module):
        raise UsageError(f"argument --weights: got {path!r}, but --backbone {spec.target} made a "
                         f"{type(model).__name__}, not an nn.Module to load a state dict into")
    try:
        raw = _read_neutral(path) if path.endswith(".npz") else torch.load(path, map_location="cpu",
                                                                          weights_only=True)
    except UsageError:
        raise
    except Exception as error:  # pickle, zip and format errors alike: not a torch file we can read safely
        reason = textwrap.shorten(" ".join(str(error).split()), 160, placeholder=" ...")
        raise UsageError(f"argument --weights: {path} is not a state dict torch can read ({type(error).__name__}: "
                         f"{reason}); expected one saved with torch.save(model.state_dict(), FILE)") from None
    state, what = weights_state(raw, path)
    torchvision = what != "our MD trainer's checkpoint" and torchvision_layout(state)
    state = adapt_state(state, model)
    expected = model.state_dict()
    problem = mismatch(state, expected)
    if problem is None:
        try:
            model.load_state_dict(state)
        except RuntimeError as error:  # e.g. a dtype that cannot be copied
            problem = " ".join(str(error).split()).split(". ")[0]
    if problem is not None:
        looks = architecture(list(expected))
        named = "resnet18" if architecture(list(state)) == "torchvision's ResNet-18" else backbone_of_names(state)
        raise UsageError(f"argument --weights: {path} does not fit --backbone {spec.target} ({len(expected)} tensors"
                         f"{', ' + looks if looks else ''}): {what_to_change(named, spec.target)} ({what} of "
                         f"{describe_state(state)}; {problem})")
    return torchvision


# ---- fingerprint, input, probe ------------------------------------------------------------------


def fingerprint(model: Any, spec: BackboneSpec) -> str:
    """sha256 of the weights as loaded: each state-dict entry's name, dtype, shape and bytes in
    key order; a callable without state: of its qualified name (and file)."""
    digest = hashlib.sha256()
    state = model.state_dict() if hasattr(model, "state_dict") else {}
    if not state:
        code = getattr(model, "__code__", None) or getattr(type(model).__call__, "__code__", None)
        digest.update(f"callable\0{spec.target}\0{getattr(code, 'co_filename', '')}".encode())
        return digest.hexdigest()
    for name, tensor in state.items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}\0{str(tensor.dtype).replace('torch.', '')}\0{list(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def named_preprocessing(size: int) -> Preprocessing:
    """What our named backbones expect at side ``size``: [-1, 1], mean 0, std 1 (Meta-Dataset's)."""
    return convention_preprocessing(NAMED_CONVENTION, size)


@functools.lru_cache(maxsize=32)
def input_constants(preprocessing: Preprocessing, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The preprocessing's numbers as float32 tensors on ``device`` (a tensor divisor, not a
    Python scalar: CUDA multiplies by a scalar's reciprocal, which is not the same division).
    Made once per (preprocessing, device): copying them to a GPU again on every batch would
    wait for the work already queued there."""
    def tensor(value: Any) -> torch.Tensor:
        return torch.tensor(value, dtype=torch.float32, device=device)
    return (tensor(preprocessing.divisor), tensor(preprocessing.low),
            tensor(preprocessing.mean).reshape(1, 3, 1, 1), tensor(preprocessing.std).reshape(1, 3, 1, 1))


def to_model_input(images: torch.Tensor, preprocessing: Preprocessing, device: torch.device,
                   constants: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> float32 [N, 3, H, W] on ``device`` as the model expects:
    ``Preprocessing.to_float``'s operations in its order (channels_last in memory on CUDA).
    ``constants``: ``input_constants(preprocessing, device)`` made beforehand (a compiled
    caller: its cache would break the graph)."""
    divisor, low, mean, std = constants or input_constants(preprocessing, torch.device(device))
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(divisor).add_(low)
    if preprocessing.normalises:
        x = x.sub_(mean).div_(std)
    memory_format = torch.channels_last if x.device.type == "cuda" else torch.contiguous_format
    return x.contiguous(memory_format=memory_format)


def autocast(device: torch.device, precision: str | None = None, cache: bool = True) -> torch.autocast:
    """bf16 autocast on CUDA, off elsewhere (the trainers'); a ``precision`` of ``PRECISIONS``
    (``--precision``) decides instead: ``float32`` takes none, ``bf16`` takes it on any device.
    ``cache`` False inside a captured CUDA graph: a cached cast of a weight would be made at
    capture and freed when the region ends, then read by every replay."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision: got {precision!r}, expected one of {', '.join(PRECISIONS)}")
    enabled = device.type == "cuda" if precision is None else precision == "bf16"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache)


def checked(spec: BackboneSpec, output: Any, rows: int) -> torch.Tensor:
    """``output`` when it is floating-point features [rows, D], else ``check_features``'s line."""
    if isinstance(output, torch.Tensor):
        check_features(spec, *describe_output(output), rows)
    else:  # a tuple, a dict, a NumPy array: named by its type
        check_features(spec, (), type(output).__name__, rows)
    return output


def set_mode(model: Any, training: bool) -> None:
    """Training or eval mode, where the model has one (an exported program's module runs as
    it was exported and refuses both)."""
    if isinstance(model, nn.Module):
        try:
            model.train(training)
        except (NotImplementedError, RuntimeError):
            pass


def probe(model: Any, spec: BackboneSpec, preprocessing: Preprocessing, device: torch.device) -> int:
    """The feature size D, from one forward pass of ``PROBE_ROWS`` images in eval mode."""
    training = isinstance(model, nn.Module) and model.training
    set_mode(model, False)
    images = torch.zeros(PROBE_ROWS, preprocessing.size, preprocessing.size, 3, dtype=torch.uint8)
    try:
        with torch.inference_mode(), autocast(device):
            output = model(to_model_input(images, preprocessing, device))
    except Exception as error:  # the user's model failed on input of the declared size
        reason = " ".join(str(error).split())
        raise UsageError(f"argument --backbone: {spec.target} failed on {PROBE_ROWS} images of "
                         f"{preprocessing.size} x {preprocessing.size} ({type(error).__name__}: {reason[:200]}"
                         f"{'...' if len(reason) > 200 else ''}); declare input_size or pass --image-size") from None
    dim = int(checked(spec, output, PROBE_ROWS).shape[1])
    set_mode(model, training)
    return dim


def load_backbone(args: argparse.Namespace, device: torch.device, default_size: int,
                  seed_name: str) -> LoadedBackbone:
    """The backbone ``args`` names (``--backbone``, ``--weights``, the preprocessing flags) on
    ``device`` in eval mode, probed; ``args.image_size`` is set to the resolved side. A named
    or module:callable backbone's random weights come from ``backbone_seed(args.seed, seed_name,
    target)``. Its input convention: the flags, else a module:callable's or a file's attributes,
    else a named backbone's (torchvision's once it holds torchvision's weights), else the one
    default (``clients.backbone_contract``)."""
    spec = backbone_spec(args)
    if spec.kind == "named":
        model: Any = _build_named(spec, args, default_size, seed_name)
    elif spec.kind == "callable":
        model = _build_callable(spec, args, seed_name)
    else:
        model = _load_file(spec)
    torchvision = load_weights(model, spec) if spec.weights is not None else False
    if spec.kind == "named":
        convention = TORCHVISION_CONVENTION if torchvision else NAMED_CONVENTION
        _declare(model, convention.attributes())
        preprocessing = resolve_preprocessing(args, None, default_size, convention)
    else:
        preprocessing = resolve_preprocessing(args, model, default_size, DEFAULT_CONVENTION)
    digest = fingerprint(model, spec)
    if isinstance(model, nn.Module):
        model = model.to(device)
        if device.type == "cuda" and not isinstance(model, torch.jit.ScriptModule):
            model = model.to(memory_format=torch.channels_last)
    set_mode(model, False)
    out_dim = probe(model, spec, preprocessing, device)
    return LoadedBackbone(spec, model, preprocessing, out_dim, digest)


class TorchFeatures:
    """``FeatureExtractor``: frozen features of uint8 NHWC images, ``batch_size`` at a time,
    eval mode, inference mode, under ``autocast(device, precision)`` (``precision`` None: bf16
    on CUDA, as the trainers; ``float32``: none, a plain forward pass; ``bf16``: on any
    device); every batch's output is checked."""

    def __init__(self, backbone: LoadedBackbone, device: torch.device, batch_size: int,
                 precision: str | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: got {batch_size}, expected an integer >= 1")
        self.backbone, self.device, self.batch_size = backbone, torch.device(device), batch_size
        autocast(self.device, precision)  # a precision not of PRECISIONS is refused here
        self.precision = precision
        self._episode_norms: int | None = None  # ``episode_norms``
        self.graphs = True  # ``features_stream`` replays captured graphs on CUDA (False: eager, for comparison)
        self._graphs: ShapeGraphs[GraphedForward] = ShapeGraphs()
        self._graph_constants: tuple[torch.Tensor, ...] | None = None
        # seconds ``features_stream`` waited for a staged batch (data) and for features (device)
        self.stream_waits = {"data": 0.0, "device": 0.0}
        # (first launch, last features) of each CUDA stream, once it ended or was closed: between
        # two streams the device has nothing queued (``bench/feature_bench.py`` sums those gaps)
        self.stream_marks: list[tuple[float, float]] = []
        # ``features_stream`` may run on several threads at once: each batch's launch (its graph's
        # input, replay and output copy; a capture) is one step of one of them, so a shared
        # graph's input and output are never overwritten before the copy of the thread using them
        self._launching = threading.Lock()

    def features(self, images: np.ndarray) -> np.ndarray:
        """uint8 [N, S, S, 3] -> float32 [N, D]."""
        model, spec = self.backbone.model, self.backbone.spec
        set_mode(model, False)
        pixels = images if images.flags.writeable else np.array(images)  # wire arrays are read-only views
        out = []
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                batch = torch.from_numpy(np.ascontiguousarray(pixels[start:start + self.batch_size]))
                output = model(to_model_input(batch, self.backbone.preprocessing, self.device))
                out.append(checked(spec, output, len(batch)).float())
        if not out:
            return np.zeros((0, self.backbone.out_dim), np.float32)
        return torch.cat(out).cpu().numpy()

    def episode_features(self, support: np.ndarray, query: np.ndarray,
                         batch_norm: str) -> tuple[np.ndarray, np.ndarray]:
        """``FeatureExtractor.episode_features``: under ``md`` and ``transductive`` one pass
        (the backbone's plain ``nn.BatchNorm2d`` adopted on first use)."""
        if not self.episode_norms(batch_norm):
            return self.features(support), self.features(query)
        model, spec = self.backbone.model, self.backbone.spec
        set_mode(model, False)
        pixels = np.concatenate([support, query])
        with torch.inference_mode(), autocast(self.device, self.precision), episode_norm(model, batch_norm, len(support), len(query)):
            output = model(to_model_input(torch.from_numpy(pixels), self.backbone.preprocessing, self.device))
            features = checked(spec, output, len(pixels)).float().cpu().numpy()
        return features[:len(support)], features[len(support):]

    def episode_norms(self, batch_norm: str) -> int:
        """The backbone's batch norms that take an episode's moments under ``batch_norm`` (0 under
        ``running``): its plain ``nn.BatchNorm2d`` adopted on first use; another kind refused."""
        if check_batch_norm(batch_norm) not in EPISODE_MOMENTS:
            return 0
        if self._episode_norms is None:
            try:
                self._episode_norms = adopt_batch_norms(self.backbone.model, batch_norm)
            except ValueError as error:
                raise UsageError(f"argument --batch-norm: {str(error).removeprefix('batch_norm: ')}") from None
        return self._episode_norms

    def features_stream(self, batches: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """``features`` of each batch in order. A thread of its own takes the batches (the
        stream's receiving included), up to ``RECEIVED_AHEAD`` ahead, and another stages each,
        up to two ahead: on CUDA into pinned
        memory and onto the device on a side stream (``staging.Stager``), so the thread that
        runs the model only launches it, and up to ``IN_FLIGHT`` batches are queued on the
        device while the host waits for the oldest one's features (one batch in flight
        left the GPU idle whenever the host's work between two batches, writing the
        features and launching the next, outlasted one batch's model time); on CPU into
        memory of its own. On CUDA our own backbones replay a captured graph per batch
        shape (``clients.torch.graphed``). Errors of ``batches`` come in order."""
        model = self.backbone.model
        set_mode(model, False)
        cuda = self.device.type == "cuda"
        stager = Stager(self.device, buckets=False)
        # receiving and staging on two threads: a batch is copied into pinned memory while the
        # next is received (one thread doing both left the GPU waiting for data)
        received = Feed(((position, images, len(images)) for position, images in enumerate(batches)),
                        lambda images: images, depth=RECEIVED_AHEAD)
        feed = Feed(received, lambda images: stager.stage_batch(images, np.zeros(len(images), np.int64)))
        in_flight: deque[tuple[torch.Tensor, Any]] = deque()  # (pinned features, their copy's event)

        waits = self.stream_waits
        marks = [0.0, 0.0]  # this stream's first launch and last wait for features (perf_counter)

        def oldest() -> np.ndarray:
            features, copied = in_flight.popleft()
            began = time.perf_counter()
            copied.synchronize()
            marks[1] = time.perf_counter()
            waits["device"] += marks[1] - began
            return features.numpy()

        try:
            while True:
                try:
                    began = time.perf_counter()
                    _, staged, rows = next(feed)
                    waits["data"] += time.perf_counter() - began
                except StopIteration:
                    break
                except BaseException:  # the batches before an error come first
                    while in_flight:
                        yield oldest()
                    raise
                with self._launching:  # a stream on another thread launches between, never within
                    images = staged.ready().images
                    if not marks[0]:
                        marks[0] = time.perf_counter()
                    graph = self._graph(images) if cuda else None
                    if graph is not None:
                        output = graph(images)
                    else:
                        with torch.inference_mode(), autocast(self.device, self.precision):
                            output = self._forward(images, rows)
                    if not cuda:
                        features = output.numpy()
                    else:
                        back = torch.empty(tuple(output.shape), dtype=torch.float32, pin_memory=True)
                        back.copy_(output, non_blocking=True)  # before the next replay overwrites the graph's output
                        done = torch.cuda.Event()
                        done.record()
                        in_flight.append((back, done))
                if not cuda:
                    yield features
                    continue
                if len(in_flight) == IN_FLIGHT:
                    yield oldest()
            while in_flight:
                yield oldest()
        finally:
            feed.close()
            if marks[0] and marks[1]:  # a stream closed before its end counts up to its last features
                self.stream_marks.append((marks[0], marks[1]))

    def _forward(self, images: torch.Tensor, rows: int, constants: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        """The model's checked float32 features of device or host uint8 ``images``."""
        pixels = to_model_input(images, self.backbone.preprocessing, self.device, constants)
        return checked(self.backbone.spec, self.backbone.model(pixels), rows).float()

    def _graph(self, images: torch.Tensor) -> GraphedForward | None:
        """The captured forward pass for this batch's shape, once it has one (our named
        backbones only, see ``clients.torch.graphed``); None: run it eager."""
        if self.backbone.spec.kind != "named" or not isinstance(self.backbone.model, nn.Module) or not self.graphs:
            return None
        constants = self._graph_constants or input_constants(self.backbone.preprocessing, self.device)
        self._graph_constants = constants

        def forward(batch: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode(), autocast(self.device, self.precision, cache=False):
                return self._forward(batch, len(batch), constants)

        return self._graphs.runner((tuple(images.shape), images.dtype), lambda: GraphedForward(forward, images))


__all__ = ["TorchFeatures", "architecture", "describe_state", "fingerprint", "from_torchvision", "load_backbone",
           "load_weights", "named_preprocessing", "set_mode", "to_model_input", "torchvision_layout"]
