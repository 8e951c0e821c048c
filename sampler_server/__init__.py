"""Deterministic episodic data-sampling service.

Data flows one way: original files -> packed LMDB store (``store``, ``pack``) ->
read-only dataset spec -> pure samplers (``core``) -> assembler -> gRPC service ->
clients. See the README for the two commands that run everything.
"""

__version__ = "0.1.0"
