"""Meta-Dataset's own backbones in Keras, the same functions as ``clients.torch.md_backbones``
(which says what each is, after the reference's ``models/functional_backbones.py``) given the
same weights (``clients.init_weights``): convolutions without bias padded as TensorFlow's
SAME (or VALID where the reference says so), kernels from a normal of deviation 0.1 truncated
at two deviations, ``layers.RowBatchNormalization`` (epsilon 1e-5), ``md-resnet18``'s input
resized to the next 32k + 1 side by ``resize_bilinear`` with aligned corners, as the
reference's. Flattened maps are in (H, W, C) order (torch's are (C, H, W))."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from clients.backbone_contract import MD_BACKBONES, md_aligned_side
from clients.tf.layers import RowBatchNormalization

keras = tf.keras
_INIT_STD = 0.1
_BN_MOMENTUM = 0.9
_BN_EPSILON = 1e-5


class AlignedResize(keras.layers.Layer):
    """``tf.compat.v1.image.resize_bilinear(x, [side, side], align_corners=True)``: the
    reference's resize before its ResNet-18."""

    def __init__(self, side: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.side = side

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return tf.compat.v1.image.resize_bilinear(inputs, [self.side, self.side], align_corners=True)

    def compute_output_shape(self, input_shape: tuple[Any, ...]) -> tuple[Any, ...]:
        return (input_shape[0], self.side, self.side, input_shape[3])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "side": self.side}


def _conv(x: tf.Tensor, filters: int, kernel: int, stride: int, name: str, padding: str = "same") -> tf.Tensor:
    return keras.layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                               kernel_initializer=keras.initializers.TruncatedNormal(stddev=_INIT_STD),
                               name=name)(x)


def _bn(x: tf.Tensor, name: str) -> tf.Tensor:
    return RowBatchNormalization(momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, name=name)(x)


def _relu(x: tf.Tensor, name: str) -> tf.Tensor:
    return keras.layers.ReLU(name=name)(x)


def md_conv4(image_size: int) -> keras.Model:
    if image_size < 16:
        raise ValueError(f"image_size: got {image_size}, expected at least 16 for md-conv4")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = inputs
    for block in range(4):
        x = _relu(_bn(_conv(x, 64, 3, 1, f"block{block}_conv"), f"block{block}_bn"), f"block{block}_relu")
        x = keras.layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name="md_conv4")


def _basic_block(x: tf.Tensor, filters: int, stride: int, project: bool, name: str) -> tf.Tensor:
    shortcut = _bn(_conv(x, filters, 1, stride, f"{name}_down_conv"), f"{name}_down_bn") if project else x
    y = _relu(_bn(_conv(x, filters, 3, stride, f"{name}_a_conv"), f"{name}_a_bn"), f"{name}_a_relu")
    y = _bn(_conv(y, filters, 3, 1, f"{name}_b_conv"), f"{name}_b_bn")
    return _relu(keras.layers.Add(name=f"{name}_add")([y, shortcut]), f"{name}_out")


def md_resnet18(image_size: int) -> keras.Model:
    if image_size < 1:
        raise ValueError(f"image_size: got {image_size}, expected a positive side for md-resnet18")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = AlignedResize(md_aligned_side(image_size), name="aligned_resize")(inputs)
    x = _relu(_bn(_conv(x, 64, 7, 2, "stem_conv"), "stem_bn"), "stem_relu")
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    for stage, filters in enumerate((64, 128, 256, 512)):
        x = _basic_block(x, filters, 1 if stage == 0 else 2, True, f"stage{stage}_0")
        x = _basic_block(x, filters, 1, False, f"stage{stage}_1")
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="pool")(x), name="md_resnet18")


def _wide_block(x: tf.Tensor, filters: int, stride: int, name: str) -> tf.Tensor:
    activated = _relu(_bn(x, f"{name}_bn1"), f"{name}_relu1")
    y = _relu(_bn(_conv(activated, filters, 3, stride, f"{name}_conv1"), f"{name}_bn2"), f"{name}_relu2")
    y = _conv(y, filters, 3, 1, f"{name}_conv2")
    return keras.layers.Add(name=f"{name}_add")([y, _conv(activated, filters, 1, stride, f"{name}_shortcut")])


def md_wrn(image_size: int) -> keras.Model:
    if image_size < 4:
        raise ValueError(f"image_size: got {image_size}, expected at least 4 for md-wrn")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = _conv(inputs, 16, 3, 1, "stem_conv")
    for group, filters in enumerate((32, 64, 128)):
        x = _wide_block(x, filters, 1 if group == 0 else 2, f"group{group}_0")
        x = _wide_block(x, filters, 1, f"group{group}_1")
    x = _relu(_bn(x, "final_bn"), "final_relu")
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="pool")(x), name="md_wrn")


def md_relationnet_convnet(image_size: int) -> keras.Model:
    side = image_size
    for _ in range(3):
        side = (side - 2) // 2
    if side < 1:
        raise ValueError(f"image_size: got {image_size}, expected at least 22 for md-relationnet-convnet")
    inputs = keras.Input(shape=(image_size, image_size, 3), dtype="float32", name="images")
    x = inputs
    for block in range(4):
        x = _conv(x, 64, 3, 1, f"block{block}_conv", padding="valid" if block < 3 else "same")
        x = _relu(_bn(x, f"block{block}_bn"), f"block{block}_relu")
        if block < 3:
            x = keras.layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name="md_relationnet_convnet")


def build_md_backbone(name: str, image_size: int) -> keras.Model:
    """One of ``MD_BACKBONES`` at ``image_size``."""
    builders = {"md-conv4": md_conv4, "md-resnet18": md_resnet18, "md-wrn": md_wrn,
                "md-relationnet-convnet": md_relationnet_convnet}
    if name not in builders:
        raise ValueError(f"backbone: got {name!r}, expected one of {', '.join(MD_BACKBONES)}")
    return builders[name](image_size)
