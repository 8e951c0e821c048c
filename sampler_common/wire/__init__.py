"""The wire both sides speak: generated gRPC code, the tensor codec and shared-memory segments.

``sampler_common.wire.gen`` is produced by ``python -m sampler_server.wire.codegen``
and committed; a test regenerates it and fails when it is stale.
"""
