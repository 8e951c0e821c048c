"""Trainer-side clients of the sampling service.

``clients.core`` is framework-free (gRPC, NumPy); ``clients.torch`` and ``clients.tf``
are thin adapters that each import only their own framework. Nothing here samples:
every composition comes from the server, identified by (request, seed, index).
"""
