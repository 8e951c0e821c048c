"""What the Meta-Dataset reference converter writes for an image it changes.

Its rule (``dataset_to_records.py``): an original file is kept byte for byte only when
it is an RGB JPEG that is neither cropped nor inverted; anything else is converted to
RGB, cropped / inverted, and saved by PIL as JPEG with PIL's defaults (quality 75).
"""

from __future__ import annotations

import io

from PIL import Image


def reference_jpeg(image: Image.Image) -> bytes:
    """The bytes the reference converter writes for ``image`` (already derived)."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG")  # PIL's defaults, as the reference calls it
    return buffer.getvalue()
