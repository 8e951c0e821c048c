"""``sampler-server cog levels|split``: ImageNet-CoG levels and level splits, without a server.

``levels`` lives in ``cog_levels_cmd`` and ``split`` in ``cog_split_cmd``; this module
only groups them under one command.
"""

from __future__ import annotations

import argparse

from sampler_server.cli import cog_levels_cmd, cog_split_cmd


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cog", help="ImageNet-CoG levels and level splits",
        description="Compute the ImageNet-CoG concept generalization levels from WordNet 3.0 and IN-21K "
        "image counts, or list one level split's records (no images read).",
    )
    commands = parser.add_subparsers(dest="cog_command", metavar="COMMAND", required=True)
    cog_levels_cmd.register(commands)
    cog_split_cmd.register(commands)
