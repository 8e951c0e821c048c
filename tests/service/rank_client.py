"""One torchrun-like rank (run as a script with WORLD_SIZE / LOCAL_RANK set): streams the
episodes of its indices (rank r of W: r, r + W, ...) from TARGET as the trainers shard
them, and prints one JSON line: each episode's (index, fingerprint, digest) and the
transport. Its client log (``clients.balancing``) goes to stderr.

Usage: python rank_client.py TARGET COUNT
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys

from clients.core import EpisodeSpec, SamplerClient

SPEC = EpisodeSpec(sources=("folder",), split="train", seed=5, image_size=32)


def digest(episode) -> str:
    h = hashlib.sha256(episode.fingerprint.encode())
    for array in (episode.support_images, episode.support_labels, episode.query_images, episode.query_labels):
        h.update(array.tobytes())
    return h.hexdigest()


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    target, count = sys.argv[1], int(sys.argv[2])
    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    with SamplerClient(target) as client:
        episodes = [(e.index, e.fingerprint, digest(e)) for e in client.episodes(SPEC, start=rank, step=world,
                                                                                  count=count)]
        transport = client.transport
    print(json.dumps({"episodes": episodes, "transport": transport}), flush=True)


if __name__ == "__main__":
    main()
