"""Command-line interface: one ``sampler-server`` entry point with subcommands."""
