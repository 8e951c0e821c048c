"""The wire both sides speak: generated gRPC code, the tensor codec and shared-memory segments.

``sampler_common.wire.gen`` is produced by ``make proto`` (``python tools/codegen.py``)
and committed; a test regenerates it and fails when it is stale.
"""
