"""Generated gRPC code for protos/ (the single source of truth) and its helpers.

``sampler_server.wire.gen`` is produced by ``python -m sampler_server.wire.codegen``
and committed; a test regenerates it and fails when it is stale.
"""
