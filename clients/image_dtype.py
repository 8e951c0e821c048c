"""The dtype in which the VTAB adapters hand over images: ``uint8`` (default) or ``float32``.

``uint8`` is the served pixels as they are (0..255, NHWC): a model converts them on its
device, in its first op (the trainers do: ``clients.backbone_contract``). ``float32`` is
the VTAB reference's ``/ 255`` (task_adaptation's ``preprocess_fn`` with input range
[0, 1]) done in the adapter, on the host. It is an option, not the default, because a
float32 batch is four times the bytes of the uint8 one and the PyTorch adapter converts
on the one thread that also receives: at 224 px on 2 cores that conversion held it to
0.79x (batch 64) and 0.89x (batch 512) of the client's own arrays (``bench/vtab_bench.py``).
Both adapters take the same names, so a script switches framework without changing them.
"""

from __future__ import annotations

IMAGE_DTYPES = ("uint8", "float32")


def check_image_dtype(dtype: str) -> str:
    """``dtype`` if an adapter can hand images over in it, else a ``ValueError`` naming the choices."""
    if dtype not in IMAGE_DTYPES:
        raise ValueError(f"dtype: got {dtype!r}, expected one of {', '.join(IMAGE_DTYPES)}")
    return dtype
