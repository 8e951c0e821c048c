"""Trainer-side clients of the sampling service.

``clients.core`` is framework-free (gRPC, NumPy): ``SamplerClient``, ``EpisodeSpec``,
``report_episode`` / ``Reporter`` (``clients.reporting``) and the resume state of a
stream (``clients.state``). ``clients.torch`` and ``clients.tf`` are thin adapters that
each import only their own framework. ``clients.orchestration`` is the run both
trainers share (loop, summary, reports, logging); each trainer adds only its model,
step and checkpoint files. Nothing here samples or resolves names: every composition
comes from the server, identified by (request, seed, index), and source and preset
names are the server's to resolve.
"""
