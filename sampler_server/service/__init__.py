"""The gRPC service: a thin layer that unpacks requests, calls the pure samplers and
the assembler, and packs replies. It decides no composition itself."""
