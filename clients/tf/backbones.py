"""The backbone contract (``clients.backbone_contract``) in TensorFlow: one loader for every
tf command (MD training and evaluation, ``transfer``, ``cog``, ``evaluate``).

``load_backbone`` turns ``--backbone`` / ``--weights`` / the preprocessing flags into a
``LoadedBackbone``:
  - a named backbone (``clients.tf.models``), its random initial weights drawn from the
    command's seed and a name (``clients.seeds.backbone_seed``), declaring Meta-Dataset's
    scaling ([-1, 1], mean 0, std 1: ``NAMED_CONVENTION``, whatever weights it is given; no tf
    file holds torchvision's);
  - ``module:callable``: the factory is called with no arguments (under the same seed) and
    returns a Keras model or any callable mapping NHWC float32 images to features;
  - a SavedModel directory (Keras ``model.export``'s ``serve`` endpoint, a callable module,
    or a ``serving_default`` signature), or a Keras model file (``.keras``, ``.h5``);
then ``--weights`` (named and ``module:callable`` backbones): Keras weights
(``.weights.h5``) or one of our tf trainer checkpoints (a ``tf.train.Checkpoint`` prefix,
its ``.index`` file or the directory holding it: its ``backbone``), or for a named backbone
a framework-neutral ``.npz`` (``clients.init_weights``: torch's names and layouts, mapped
onto the Keras layers and transposed here). ``--init-seed S`` starts a named backbone from
``neutral_weights(name, side, S)``, the numbers torch starts from with the same flag. A
file that does not fit is refused with one line naming what it holds (the named backbone
its arrays or keys match), the flag to change (``--backbone conv4``) and what the backbone
expected.

A Keras model whose input shape is fixed and square declares its side by that shape. The
model is probed once (2 images at the resolved size, ``training=False``) for its feature
size; a wrong output ([N, D, 1], integers, a dict) is refused there with
``check_features``'s line, before any data is asked for. The fingerprint is the sha256
of the weights as loaded (each array's position, dtype, shape and bytes in the model's
order; a SavedModel's by its variables' names), which keys feature caches.

``to_model_input`` is the one place uint8 images become the model's input: the same
operations, in the same order, as ``Preprocessing.to_float``; ``TFFeatures`` is the
``FeatureExtractor`` of ``evaluate``.
"""

from __future__ import annotations

import math
import argparse
import collections
import contextlib
import hashlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from clients.backbone_contract import (DEFAULT_CONVENTION, NAMED_CONVENTION, BackboneSpec, LoadedBackbone,
                                       Preprocessing, backbone_spec, check_features, convention_preprocessing,
                                       describe_output, load_callable, resolve_preprocessing)
from clients.batch_norm import EPISODE_MOMENTS, check_batch_norm
from clients.errors import UsageError
from clients.init_weights import (backbone_of_keras_shapes, backbone_of_names, chw_to_hwc_rows, layout, neutral_weights,
                                  read_npz, what_to_change)
from clients.md_learners import RELATION_DEPTH, relation_pooled_side
from clients.seeds import backbone_seed
from clients.tf import models

keras = tf.keras
PROBE_ROWS = 2
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _reason(error: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message`` on one line, cut at a word with '...' past ``limit``."""
    lines = str(error).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else ""
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def named_preprocessing(size: int) -> Preprocessing:
    """What our named backbones declare, at side ``size``: [-1, 1], mean 0, std 1."""
    return convention_preprocessing(NAMED_CONVENTION, size)


# ---- building -----------------------------------------------------------------------------


class _Declared:
    """Declared preprocessing values read like a model's attributes."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)


class SavedModelFunction:
    """A SavedModel's inference function (Keras ``serve``, the module's ``__call__`` or the
    ``serving_default`` signature's one output); holds the loaded object, whose variables
    live as long as it does."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.loaded = tf.saved_model.load(path)
        if hasattr(self.loaded, "serve"):  # Keras model.export
            self.function: Callable[[tf.Tensor], Any] = self.loaded.serve
        elif callable(self.loaded):
            self.function = self.loaded
        elif "serving_default" in self.loaded.signatures:
            self.function = self._signature(self.loaded.signatures["serving_default"])
        else:
            raise ValueError("the SavedModel has no serve endpoint, is not callable, and has no serving_default "
                             "signature")

    @staticmethod
    def _signature(signature: Any) -> Callable[[tf.Tensor], Any]:
        def call(images: tf.Tensor) -> Any:
            outputs = signature(images)
            return next(iter(outputs.values())) if len(outputs) == 1 else outputs
        return call

    def __call__(self, images: tf.Tensor) -> Any:
        return self.function(images)


def _build_named(spec: BackboneSpec, args: argparse.Namespace, default_size: int, seed_name: str) -> keras.Model:
    size = resolve_preprocessing(args, None, default_size, NAMED_CONVENTION).size
    keras.utils.set_random_seed(backbone_seed(args.seed, seed_name, spec.target))
    try:
        return models.build_backbone(spec.target, size)
    except ValueError as error:  # e.g. conv4 below 16 px
        raise UsageError(f"argument --image-size: {error}") from None


def _build_callable(spec: BackboneSpec, args: argparse.Namespace, seed_name: str) -> Any:
    factory = load_callable(spec.target)
    keras.utils.set_random_seed(backbone_seed(args.seed, seed_name, spec.target))
    try:
        model = factory()
    except TypeError as error:
        raise UsageError(f"argument --backbone: {spec.target}() failed ({_reason(error)}); expected a factory "
                         "called with no arguments that returns the model") from None
    if not callable(model):
        raise UsageError(f"argument --backbone: {spec.target}() returned a {type(model).__name__}, expected a Keras "
                         "model or a callable mapping NHWC float32 images to features [N, D]")
    return model


def _load_file(spec: BackboneSpec) -> Any:
    directory = Path(spec.target).is_dir()
    try:
        if directory:
            return SavedModelFunction(spec.target)
        return keras.models.load_model(spec.target, compile=False)
    except Exception as error:  # not a SavedModel / Keras model file: any of TF's and Keras's errors
        kind = "a SavedModel directory" if directory else "a Keras model file (.keras, .h5)"
        raise UsageError(f"argument --backbone: got {spec.target!r}, expected {kind} ({_reason(error, 160)})") from None


# ---- --weights -------------------------------------------------------------------------------


def checkpoint_prefix(path: str) -> str | None:
    """The tf.train.Checkpoint prefix ``path`` names (prefix, ``.index`` file or directory), else None."""
    if Path(path).is_dir():
        return tf.train.latest_checkpoint(path)
    prefix = path[: -len(".index")] if path.endswith(".index") else path
    return prefix if Path(prefix + ".index").exists() else None


def _checkpoint_shapes(prefix: str) -> tuple[list[tuple[int, ...]], int]:
    """(shapes of the variables of the checkpoint's ``backbone`` object, count of all its
    variables). Read from the object graph, as a restore matches them: a variable's key is
    the first path that reaches it (an optimizer's list of the variables it trains, say)."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    pending = [child.node_id for child in graph.nodes[0].children if child.local_name == "backbone"]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending += [child.node_id for child in graph.nodes[node].children]
    keys = {attribute.checkpoint_key for node in seen for attribute in graph.nodes[node].attributes
            if attribute.name == "VARIABLE_VALUE"}
    every = sum(1 for node in graph.nodes for attribute in node.attributes if attribute.name == "VARIABLE_VALUE")
    return [tuple(shapes[key]) for key in sorted(keys)], every


def _h5_shapes(path: str) -> list[tuple[int, ...]]:
    """Shapes of every array of a Keras weights file."""
    import h5py  # Keras's own dependency for .h5 files

    found: list[tuple[int, ...]] = []
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda _, item: found.append(tuple(item.shape)) if isinstance(item, h5py.Dataset) else None)
    return found


def _arrays(shapes: Iterable[tuple[int, ...]]) -> str:
    shapes = list(shapes)
    return f"{len(shapes)} arrays ({sum(int(np.prod(s)) for s in shapes):,} values)"


def _difference(held: list[tuple[int, ...]], expected: list[tuple[int, ...]]) -> str:
    """The first shape one side has and the other lacks (shapes compared as multisets)."""
    extra = sorted((collections.Counter(held) - collections.Counter(expected)).elements())
    missing = sorted((collections.Counter(expected) - collections.Counter(held)).elements())
    parts = []
    if extra:
        parts.append(f"{len(extra)} of the file's arrays have no place in it (first {list(extra[0])})")
    if missing:
        parts.append(f"{len(missing)} of its arrays are not in the file (first {list(missing[0])})")
    return "; ".join(parts)


def load_weights(model: Any, spec: BackboneSpec) -> None:
    """Load ``--weights`` (Keras weights or our tf checkpoint) into ``model``, or one line
    naming the file, what it holds and what the backbone expected."""
    path = str(spec.weights)
    if not isinstance(model, keras.Model):
        raise UsageError(f"argument --weights: got {path!r}, but --backbone {spec.target} made a "
                         f"{type(model).__name__}, not a Keras model to load weights into")
    expected = [tuple(int(d) for d in w.shape) for w in model.weights]
    wanted = f"--backbone {spec.target} expects {_arrays(expected)}"
    prefix = checkpoint_prefix(path)
    try:
        if prefix is not None:
            held, everything = _checkpoint_shapes(prefix)
            what = (f"a tf checkpoint whose backbone holds {_arrays(held)}" if held
                    else f"a tf checkpoint of {everything} values, none under 'backbone'")
        elif path.endswith(".h5"):
            held = _h5_shapes(path)
            what = f"Keras weights of {_arrays(held)}"
        else:
            raise UsageError(f"argument --weights: got {path!r}, expected Keras weights (.weights.h5) or our tf "
                             f"trainer's checkpoint (a prefix, its .index file or the directory holding it)")
    except (OSError, ValueError, tf.errors.OpError) as error:
        raise UsageError(f"argument --weights: got {path!r}, which cannot be read as Keras weights or a tf "
                         f"checkpoint ({_reason(error, 160)}); {wanted}") from None
    if sorted(held) != sorted(expected):
        advice = what_to_change(backbone_of_keras_shapes(held), spec.target, "arrays")
        raise UsageError(f"argument --weights: {path} is {what}, {wanted}: {advice} ({_difference(held, expected)})")
    try:
        if prefix is not None:
            tf.train.Checkpoint(backbone=model).restore(prefix).expect_partial().assert_existing_objects_matched()
        else:
            model.load_weights(path)
    except (AssertionError, ValueError, OSError, tf.errors.OpError) as error:  # same shapes, another layout
        raise UsageError(f"argument --weights: {path} is {what}, but they do not load into --backbone "
                         f"{spec.target} ({_reason(error, 160)})") from None


def keras_value(kind: str, value: np.ndarray) -> np.ndarray:
    """A tensor in torch's layout as its Keras variable holds it: a convolution's
    [out, in, kh, kw] as [kh, kw, in, out], a linear [out, in] as [in, out]."""
    if kind == "conv" and value.ndim == 4:
        return value.transpose(2, 3, 1, 0)
    if kind == "linear" and value.ndim == 2:
        return value.T
    return value


def assign_neutral(model: keras.Model, backbone: str, image_size: int, arrays: Mapping[str, np.ndarray],
                   source: str) -> None:
    """Assign framework-neutral ``arrays`` (torch names and layouts) to a named backbone's
    Keras variables, or one line naming ``source``, what it holds and what was expected
    (``num_batches_tracked`` has no Keras variable and is not needed)."""
    tensors = layout(backbone, image_size)
    expected = {t.name: t for t in tensors if t.keras_variable is not None}
    given = {name: value for name, value in arrays.items() if not name.endswith("num_batches_tracked")}
    missing = [name for name in expected if name not in given]
    unexpected = [name for name in given if name not in expected]
    wrong = [name for name in given if name in expected and tuple(given[name].shape) != expected[name].shape]
    problems = []
    if missing:
        problems.append(f"{len(missing)} of the backbone's tensors missing (first {missing[0]})")
    if unexpected:
        problems.append(f"{len(unexpected)} it does not have (first {unexpected[0]})")
    if wrong:
        problems.append(f"{wrong[0]} is {list(given[wrong[0]].shape)} there, {list(expected[wrong[0]].shape)} "
                        "expected")
    if problems:
        raise UsageError(f"argument --weights: {source} (framework-neutral weights of {len(arrays)} tensors) does not "
                         f"fit --backbone {backbone} ({len(tensors)} tensors): "
                         f"{what_to_change(backbone_of_names(arrays), backbone)} ({'; '.join(problems)})")
    for name, tensor in expected.items():
        variable = getattr(model.get_layer(tensor.keras_layer), str(tensor.keras_variable))
        variable.assign(keras_value(tensor.kind, np.asarray(given[name], np.float32)))


def assign_neutral_head(head: keras.Model, backbone: str, image_size: int, arrays: Mapping[str, np.ndarray]) -> None:
    """A linear head's framework-neutral weights (``init_weights.neutral_head``: torch's
    [classes, features]) into the Keras head over ``backbone``'s features: transposed, and
    over a flattened map (``conv4``, ``md-conv4``, ``md-relationnet-convnet``: 64 channels) its
    columns reordered from torch's (C, H, W) flatten to tf's (H, W, C), so the head computes
    the same logits as torch's over the same network."""
    weight = np.asarray(arrays["linear.weight"], np.float32)
    if backbone in ("conv4", "md-conv4", "md-relationnet-convnet"):
        side = math.isqrt(weight.shape[1] // 64)
        weight = chw_to_hwc_rows(weight, 64, side)
    dense = head.get_layer("logits")
    dense.kernel.assign(keras_value("linear", weight))
    if dense.bias is not None:  # a cosine head has none
        dense.bias.assign(np.asarray(arrays["linear.bias"], np.float32))


def assign_neutral_relation(module: keras.Model, side: int, arrays: Mapping[str, np.ndarray]) -> None:
    """The relation module's framework-neutral weights (``init_weights.neutral_relation``, torch
    layouts) into the Keras one: kernels transposed, fc1's rows from torch's (C, H, W) flatten of
    the pooled map to tf's (H, W, C)."""
    pooled = relation_pooled_side(side)
    for block in (1, 2):
        module.get_layer(f"relation_conv{block}").kernel.assign(keras_value("conv", arrays[f"conv{block}.weight"]))
        norm = module.get_layer(f"relation_bn{block}")
        norm.gamma.assign(arrays[f"bn{block}.weight"])
        norm.beta.assign(arrays[f"bn{block}.bias"])
    fc1 = np.asarray(arrays["fc1.weight"], np.float32)
    if pooled > 1:
        fc1 = chw_to_hwc_rows(fc1, RELATION_DEPTH, pooled)
    for name, weight in (("fc1", fc1), ("fc2", arrays["fc2.weight"])):
        dense = module.get_layer(f"relation_{name}")
        dense.kernel.assign(keras_value("linear", weight))
        dense.bias.assign(arrays[f"{name}.bias"])


def load_neutral(model: Any, spec: BackboneSpec, image_size: int) -> None:
    """``--weights FILE.npz``: framework-neutral weights into a named backbone, or one line."""
    path = str(spec.weights)
    if spec.kind != "named" or not isinstance(model, keras.Model):
        raise UsageError(f"argument --weights: got {path!r}, framework-neutral weights (.npz) load into a named "
                         f"backbone only, not --backbone {spec.target}")
    try:
        arrays = read_npz(path)
    except ValueError as error:
        raise UsageError(f"argument --weights: {error}") from None
    assign_neutral(model, spec.target, image_size, arrays, path)


# ---- fingerprint, input, probe ------------------------------------------------------------------


def _variables(model: Any) -> list[Any]:
    if isinstance(model, keras.Model):
        return list(model.weights)
    return list(getattr(model, "variables", ()) or ())


def fingerprint(model: Any, spec: BackboneSpec) -> str:
    """sha256 of the weights as loaded: each array's position, dtype, shape and bytes in the
    model's order (a SavedModel: its variables by name, sorted); a callable without
    variables: of its name."""
    digest = hashlib.sha256()

    def add(name: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        digest.update(f"{name}\0{value.dtype.name}\0{list(value.shape)}\0".encode())
        digest.update(value.tobytes())

    if isinstance(model, SavedModelFunction):
        reader = tf.train.load_checkpoint(str(Path(model.path) / "variables" / "variables"))
        for key in sorted(reader.get_variable_to_shape_map()):
            if key.endswith(_VALUE_SUFFIX):
                add(key, np.asarray(reader.get_tensor(key)))
        return digest.hexdigest()
    variables = _variables(model)
    if not variables:
        digest.update(f"callable\0{spec.target}".encode())
    for position, variable in enumerate(variables):
        add(str(position), np.asarray(variable.numpy()))
    return digest.hexdigest()


def to_model_input(images: Any, preprocessing: Preprocessing) -> tf.Tensor:
    """uint8 [N, H, W, 3] -> float32 [N, H, W, 3] as the model expects: ``Preprocessing.to_float``'s
    operations in its order (a division by the divisor, then the low end; then mean and std),
    bit for bit, eager or compiled. The divisions are ``divide_no_nan`` (the divisors are never
    zero): inside a ``tf.function`` Grappler's constant folding turns a plain division by a
    constant into a multiplication by its reciprocal, which rounds differently."""
    x = tf.math.divide_no_nan(tf.cast(images, tf.float32), tf.constant(preprocessing.divisor, tf.float32)) \
        + tf.constant(preprocessing.low, tf.float32)
    if preprocessing.normalises:
        x = tf.math.divide_no_nan(x - tf.constant(preprocessing.mean, tf.float32),
                                  tf.constant(preprocessing.std, tf.float32))
    return x


def inference(model: Any) -> Callable[[tf.Tensor], Any]:
    """The model as a function of a float32 batch in inference mode (Keras: ``training=False``)."""
    if isinstance(model, keras.layers.Layer):
        return lambda x: model(x, training=False)
    return model


def _declarations(model: Any) -> Any:
    """What the model declares: its attributes, and a fixed square input of a Keras model as
    ``input_size`` where it has no such attribute."""
    if not isinstance(model, keras.Model) or getattr(model, "input_size", None) is not None:
        return model
    try:
        shape = tuple(model.inputs[0].shape) if model.inputs else ()
    except (AttributeError, ValueError):
        shape = ()
    if len(shape) != 4 or shape[1] is None or shape[1] != shape[2]:
        return model
    return _Declared({**{name: getattr(model, name, None) for name in ("input_range", "mean", "std")},
                      "input_size": int(shape[1])})


def checked(spec: BackboneSpec, output: Any, rows: int) -> Any:
    """``output`` when it is floating-point features [rows, D], else ``check_features``'s line."""
    if isinstance(output, (tf.Tensor, tf.Variable, np.ndarray)):
        check_features(spec, *describe_output(output), rows)
    else:  # a dict, a tuple, a list: named by its type
        check_features(spec, (), type(output).__name__, rows)
    return output


def probe(model: Any, spec: BackboneSpec, preprocessing: Preprocessing) -> int:
    """The feature size D, from one inference call on ``PROBE_ROWS`` images."""
    images = tf.zeros((PROBE_ROWS, preprocessing.size, preprocessing.size, 3), tf.uint8)
    try:
        output = inference(model)(to_model_input(images, preprocessing))
    except Exception as error:  # the user's model failed on input of the declared size
        raise UsageError(f"argument --backbone: {spec.target} failed on {PROBE_ROWS} images of {preprocessing.size} x "
                         f"{preprocessing.size} ({_reason(error)}); declare input_size or pass --image-size") from None
    return int(checked(spec, output, PROBE_ROWS).shape[1])


def load_backbone(args: argparse.Namespace, default_size: int, seed_name: str) -> LoadedBackbone:
    """The backbone ``args`` names (``--backbone``, ``--weights``, the preprocessing flags),
    probed; ``args.image_size`` is set to the resolved side. A named or module:callable
    backbone's random weights come from ``backbone_seed(args.seed, seed_name, target)``, a named
    one's from ``neutral_weights`` with ``--init-seed``. Its input convention: the flags, else a
    module:callable's or a file's declarations, else a named backbone's, else the one default
    (``clients.backbone_contract``). Call it under the device (or distribution strategy scope)
    its variables belong to."""
    spec = backbone_spec(args)
    if spec.kind == "named":
        model: Any = _build_named(spec, args, default_size, seed_name)
        preprocessing = resolve_preprocessing(args, None, default_size, NAMED_CONVENTION)
    else:
        model = _build_callable(spec, args, seed_name) if spec.kind == "callable" else _load_file(spec)
        preprocessing = resolve_preprocessing(args, _declarations(model), default_size, DEFAULT_CONVENTION)
    init_seed = args.init_seed
    if spec.kind == "named" and init_seed is not None:
        assign_neutral(model, spec.target, preprocessing.size,
                       neutral_weights(spec.target, preprocessing.size, init_seed), f"--init-seed {init_seed}")
    if spec.weights is not None and spec.weights.endswith(".npz"):
        load_neutral(model, spec, preprocessing.size)
    elif spec.weights is not None:
        if isinstance(model, keras.Model) and not model.built:  # a subclassed model has no variables yet
            probe(model, spec, preprocessing)
        load_weights(model, spec)
    out_dim = probe(model, spec, preprocessing)
    return LoadedBackbone(spec, model, preprocessing, out_dim, fingerprint(model, spec))


class TFFeatures:
    """``FeatureExtractor``: frozen features of uint8 NHWC images, ``batch_size`` at a time,
    inference mode (``training=False``), on ``device`` (default: TensorFlow's placement);
    every batch's output is checked."""

    def __init__(self, backbone: LoadedBackbone, batch_size: int, device: str | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: got {batch_size}, expected an integer >= 1")
        self.backbone, self.batch_size, self.device = backbone, batch_size, device
        self._episode_norms: int | None = None  # ``episode_norms``
        self._episode_embed: dict[str, Callable[..., Any]] = {}  # by batch-norm mode
        size = backbone.preprocessing.size
        forward, preprocessing = inference(backbone.model), backbone.preprocessing
        self._embed = tf.function(lambda images: forward(to_model_input(images, preprocessing)),
                                  input_signature=[tf.TensorSpec((None, size, size, 3), tf.uint8)])

    def features(self, images: np.ndarray) -> np.ndarray:
        """uint8 [N, S, S, 3] -> float32 [N, D]."""
        out = []
        with tf.device(self.device) if self.device else contextlib.nullcontext():
            for start in range(0, len(images), self.batch_size):
                batch = np.ascontiguousarray(images[start:start + self.batch_size])
                output = checked(self.backbone.spec, self._embed(batch), len(batch))
                out.append(np.asarray(tf.cast(output, tf.float32)))
        if not out:
            return np.zeros((0, self.backbone.out_dim), np.float32)
        return np.concatenate(out)

    def episode_features(self, support: np.ndarray, query: np.ndarray,
                         batch_norm: str) -> tuple[np.ndarray, np.ndarray]:
        """``FeatureExtractor.episode_features``: under ``md`` and ``transductive`` one pass
        (the model's plain Keras batch norms adopted on first use)."""
        if not self.episode_norms(batch_norm):
            return self.features(support), self.features(query)
        if batch_norm not in self._episode_embed:
            model, preprocessing = self.backbone.model, self.backbone.preprocessing
            forward = inference(model)

            def embed(images: tf.Tensor, support: tf.Tensor, query: tf.Tensor) -> Any:
                with models.episode_norm(model, batch_norm, support, query, padded=False):
                    return forward(to_model_input(images, preprocessing))

            size = self.backbone.preprocessing.size
            count = tf.TensorSpec((), tf.int32)
            self._episode_embed[batch_norm] = tf.function(
                embed, input_signature=[tf.TensorSpec((None, size, size, 3), tf.uint8), count, count])
        pixels = np.concatenate([support, query])
        with tf.device(self.device) if self.device else contextlib.nullcontext():
            output = self._episode_embed[batch_norm](pixels, tf.constant(len(support), tf.int32),
                                                     tf.constant(len(query), tf.int32))
            features = np.asarray(tf.cast(checked(self.backbone.spec, output, len(pixels)), tf.float32))
        return features[:len(support)], features[len(support):]

    def episode_norms(self, batch_norm: str) -> int:
        """The model's batch norms that take an episode's moments under ``batch_norm`` (0 under
        ``running``): its plain Keras batch norms adopted on first use; another kind refused."""
        if check_batch_norm(batch_norm) not in EPISODE_MOMENTS:
            return 0
        if self._episode_norms is None:
            try:
                self._episode_norms = models.episode_batch_norms(self.backbone.model, batch_norm)
            except ValueError as error:
                raise UsageError(f"argument --batch-norm: {str(error).removeprefix('batch_norm: ')}") from None
        return self._episode_norms


__all__ = ["SavedModelFunction", "TFFeatures", "assign_neutral", "assign_neutral_head", "checkpoint_prefix", "fingerprint", "inference",
           "keras_value", "load_backbone", "load_neutral", "load_weights", "named_preprocessing", "to_model_input"]
