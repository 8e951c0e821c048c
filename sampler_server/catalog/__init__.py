"""What the server serves, without gRPC: the stores and their specs (``registry``), the
tasks over them (``tasks``), ImageNet-CoG level splits (``cog``, ``cog_files``), episode
replay (``replay``) and the wire's enums and options as core values (``wire_values``).

Both the service and the CLI import this package, so a command run on a data directory
resolves a store, a task or a split exactly as the server does. Nothing here imports
``grpc`` or ``sampler_server.service``."""
