"""What the server and its clients both import, and nothing else: the wire.

A trainer machine installs this package and ``clients`` with grpcio, protobuf and
NumPy only; the server's dependencies (LMDB, OpenCV, SciPy, ...) come with the
``[server]`` extra. Nothing here imports ``sampler_server`` or ``clients``
(tests/test_import_contract.py holds both sides to it).

- ``wire.gen``: the generated gRPC code of ``protos/`` (``make proto``, that is
  ``python tools/codegen.py``, writes it);
- ``wire.tensors``: the packed tensor codec of replies;
- ``wire.segments``: the same-host transport's shared-memory segments;
- ``intervals``: the one 95% confidence interval of reports and trainers;
- ``protocols``: the protocol ids of metric reports, defined once for both sides.
"""
