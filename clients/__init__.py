"""Trainer-side clients of the sampling service.

The framework-free client (gRPC, NumPy), by concern: ``clients.core`` gathers its
public names (``SamplerClient``, ``EpisodeSpec``, the array types, ``Reporter``);
``client`` composes ``channel`` (connection, TLS, token, retries, same host),
``stream`` (the resumable stream engine) and one module per protocol under
``protocols`` (``md``, ``vtab``, ``baselines``, ``cog``: arrays, requests, calls);
``errors``, ``tensors``, ``reporting`` and ``state`` (resume state, shards) serve
them. ``clients.torch`` and ``clients.tf`` are thin adapters that each import only
their own framework.

The trainers: ``trainer_args`` (every command line), ``trainer_shell`` (usage
errors, exit codes), ``seeds`` (every random draw seeded from the run's seed by
name), and one framework-free run per protocol that both frameworks share:
``md_train`` (Meta-Dataset training), ``vtab_transfer`` (VTAB-1k transfer, with
``vtab_transfer_protocols``) and ``cog_eval`` (the ImageNet-CoG linear evaluation,
with ``cog_protocol`` and ``cog_cache``); each framework adds only its model, step
and checkpoint files, in modules of the same names (``clients.torch.md_train``,
...). Nothing here samples or resolves names: every composition comes from the
server, identified by (request, seed, index), and source and preset names are the
server's to resolve.
"""
