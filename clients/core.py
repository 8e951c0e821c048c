"""The framework-free client's public names, in one import (gRPC and NumPy only).

``from clients.core import SamplerClient, EpisodeSpec`` is what a user's code needs;
each name lives in the module of its concern:

- ``clients.client``: ``SamplerClient`` (one channel, every protocol's calls)
- ``clients.errors``: ``SamplerClientError``
- ``clients.channel``: ``RetryPolicy``, ``RETRYABLE`` (connection, TLS, token, retries, same host)
- ``clients.stream``: the resumable stream engine behind every stream
- ``clients.state``: ``shard_window`` and a stream's resume state
- ``clients.tensors``: ``to_array``, ``resize_name`` (wire tensors as NumPy arrays)
- ``clients.protocols.md``: ``EpisodeSpec``, ``EpisodeArrays``, ``BatchArrays``, ``batch_request``
- ``clients.protocols.vtab``: ``TaskBatchArrays``, ``TaskEpisodeArrays``, ``task_batch_request``, ``VTAB_RESIZE``
- ``clients.protocols.cog``: ``CogBatchArrays``, ``cog_split_request``
- ``clients.reporting``: ``Reporter``, ``episode_report``, ``run_config_json``
"""

from __future__ import annotations

from clients.channel import RETRYABLE, STREAM_RETRYABLE, RetryPolicy
from clients.client import SamplerClient
from clients.errors import SamplerClientError
from clients.protocols.cog import CogBatchArrays, cog_split_request
from clients.protocols.md import BatchArrays, EpisodeArrays, EpisodeSpec, batch_request
from clients.protocols.vtab import VTAB_RESIZE, TaskBatchArrays, TaskEpisodeArrays, task_batch_request
from clients.reporting import Reporter, episode_report, run_config_json
from clients.state import shard_window
from clients.tensors import resize_name, to_array

__all__ = [
    "RETRYABLE", "STREAM_RETRYABLE", "VTAB_RESIZE", "BatchArrays", "CogBatchArrays", "EpisodeArrays", "EpisodeSpec",
    "Reporter", "RetryPolicy", "SamplerClient", "SamplerClientError", "TaskBatchArrays", "TaskEpisodeArrays",
    "batch_request", "cog_split_request", "episode_report", "resize_name", "run_config_json", "shard_window",
    "task_batch_request", "to_array",
]
