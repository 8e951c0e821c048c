"""Turning original dataset downloads into packed stores.

A converter (``pack.sources.<source>``) only READS the original layout and returns
a ``SourcePlan``: the classes in id order, each with a lazy list of items (which
file, which derivation). The pipeline (``pack.pipeline``) does everything else the
same way for every source: decoding and checking images on worker processes,
re-encoding, writing the store atomically, fingerprinting, the summary.
"""
