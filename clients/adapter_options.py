"""The options every adapter takes under the same name: the connection, the image ``dtype``,
and VTAB's order.

``client_options``: how to connect, as one dict of ``SamplerClient``'s keyword arguments
(``tls_ca``, ``tls_cert``, ``tls_key``, ``token``, ``connect_timeout``, ``call_timeout``,
``retry``, ...; ``None``: the client's defaults and environment, ``SAMPLER_TLS_CA``,
``SAMPLER_TOKEN``, ...). Every adapter of both frameworks opens its clients with it (one
per DataLoader worker), so it must pickle: paths and strings, not open files. A key
``SamplerClient`` does not take is refused when the adapter is made (``connection_options``),
not later in a worker.

``dtype``: ``"uint8"`` (the default of every adapter, both frameworks, every protocol) hands
over the served pixels as they are (0..255, NHWC): a model converts them on its device, in
its first op (the trainers do: ``clients.backbone_contract``). ``"float32"`` is the
references' ``/ 255`` (task_adaptation's ``preprocess_fn`` with input range [0, 1]) done in
the adapter, on the host, with one NumPy division shared by both frameworks (correctly
rounded, so equal to ``tf.cast(images, tf.float32) / 255``). It is an option, not the
default, because a float32 batch is four times the bytes of the uint8 one and the PyTorch
adapter converts on the one thread that also receives: at 224 px on 2 cores that
conversion held it to 0.79x (batch 64) and 0.89x (batch 512) of the client's own arrays
(``bench/vtab_bench.py``). Only images change; labels stay int64.

``shuffle`` (VTAB task batches): ``None`` (the default) orders a split as the VTAB reference
orders it by role: task_adaptation reads its training split shuffled and repeated and its
evaluation split once, in order (``task_adaptation/data_loader.py``: ``for_eval=mode ==
"eval"``). A split named ``train...`` (``train800``, ``train800val200``, ``train``,
``trainval``, ``trainval1000``, ...) is a training split; ``val200``, ``val`` and ``test`` are
evaluation splits. ``True`` / ``False`` override it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from clients.client import SamplerClient

IMAGE_DTYPES = ("uint8", "float32")


def connection_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` (an adapter's ``client_options``) as a dict of ``SamplerClient`` keyword arguments.

    Raises:
        ValueError: ``client_options: got 'tls-ca', expected keywords of SamplerClient: ...``.
    """
    given = dict(options or {})
    allowed = [name for name in inspect.signature(SamplerClient.__init__).parameters
               if name not in ("self", "address")]
    wrong = [name for name in given if name not in allowed]
    if wrong:
        raise ValueError(f"client_options: got {', '.join(map(repr, wrong))}, expected keywords of SamplerClient: "
                         f"{', '.join(allowed)}")
    return given


def check_image_dtype(dtype: str) -> str:
    """``dtype`` if an adapter can hand images over in it, else a ``ValueError`` naming the choices."""
    if dtype not in IMAGE_DTYPES:
        raise ValueError(f"dtype: got {dtype!r}, expected one of {', '.join(IMAGE_DTYPES)}")
    return dtype


def images_as(images: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 pixels in ``dtype``: a copy the caller owns (the wire's array is a read-only view
    of the reply), or ``/ 255`` in float32, in [0, 1]."""
    if check_image_dtype(dtype) == "uint8":
        return np.array(images, copy=True)
    return np.divide(images, np.float32(255.0), dtype=np.float32)


def vtab_shuffles(split: str, shuffle: bool | None) -> bool:
    """Whether a VTAB task batch stream of ``split`` is shuffled: ``shuffle`` when given, else
    the reference's choice for the split's role (training splits shuffled, see above)."""
    if shuffle is None:
        return split.startswith("train")
    if not isinstance(shuffle, bool):
        raise ValueError(f"shuffle: got {shuffle!r}, expected True, False or None (None: shuffled for the "
                         "training splits train..., in order for val200, val and test)")
    return shuffle
