"""Reporting evaluated episodes: the report is built from the episode itself.

An episode delivered by ``SamplerClient`` keeps the request it came from, so a
report needs only what the caller computed: the predicted label of each query
image and any further metrics. ``episode_report`` builds the ``MetricReport`` (key
(run, protocol ``sampler_common.protocols.MD``, source, split, seed, index), fingerprint, request,
accuracy from the predictions); ``Reporter`` collects reports and sends them in
batches with the run's configuration. Reports are idempotent on the server: a
resent report is counted as a duplicate, a different result for a reported episode
is refused (FAILED_PRECONDITION), and so is a different configuration for a run
that has one (the first configuration a run reports is kept).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from sampler_common.protocols import MD
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

from clients.errors import SamplerClientError
from clients.protocols import Rpc


class ReportableEpisode(Protocol):
    """What a report reads of an episode (``clients.protocols.md.EpisodeArrays`` has it)."""

    source: str
    index: int
    fingerprint: str
    request: pb.EpisodeRequest | None
    query_labels: np.ndarray

    @property
    def ways(self) -> int: ...


def _labels(predictions: Any) -> np.ndarray:
    if hasattr(predictions, "detach"):  # a torch tensor, possibly on a GPU
        predictions = predictions.detach().cpu()
    if hasattr(predictions, "numpy"):  # torch or TensorFlow tensors
        predictions = predictions.numpy()
    return np.asarray(predictions)


def _text(value: Any) -> str:
    value = _labels(value) if hasattr(value, "numpy") else value
    value = value.item() if isinstance(value, np.ndarray) else value
    return value.decode() if isinstance(value, bytes) else str(value)


def _episode_fields(episode: Any) -> tuple[str, int, str, pb.EpisodeRequest | None, np.ndarray, int]:
    """(source, index, fingerprint, request, query labels, ways) of an ``EpisodeArrays`` or
    of an adapter's item (the torch dict, or the tf dict of tensors / NumPy values)."""
    if not isinstance(episode, Mapping):
        return (episode.source, int(episode.index), episode.fingerprint, episode.request,
                np.asarray(episode.query_labels), int(episode.ways))
    request = episode.get("request")
    if request is not None and not isinstance(request, pb.EpisodeRequest):  # serialised (bytes, a tf.string)
        data = _labels(request).item() if hasattr(request, "numpy") else request
        request = pb.EpisodeRequest.FromString(data) if data else None
    return (_text(episode["source"]), int(_labels(episode["index"])), _text(episode["fingerprint"]), request,
            _labels(episode["query_labels"]), int(_labels(episode["ways"])))


def episode_report(run_id: str, episode: ReportableEpisode | Mapping[str, Any], predictions: Any,
                   metrics: Mapping[str, float] | None = None) -> pb.MetricReport:
    """The report of one evaluated episode (see ``SamplerClient.report_episode``).

    ``episode`` is an ``EpisodeArrays`` from ``SamplerClient`` or an item of either
    adapter (``clients.torch.EpisodeDataset``, ``clients.tf.EpisodeSource``) as it was
    yielded.

    Raises:
        ValueError: the episode carries no request, the predictions are not one label in
            0 .. ways - 1 per query image, or a metric is not a finite number.
    """
    source, index, fingerprint, request, truth, ways = _episode_fields(episode)
    if request is None:
        raise ValueError("episode: it carries no request; report episodes as the client or an adapter delivered them")
    labels = _labels(predictions)
    if labels.ndim != 1 or len(labels) != len(truth):
        raise ValueError(f"predictions: got {labels.size if labels.ndim else 'a scalar'} labels, "
                         f"expected {len(truth)} (one per query image)")
    if len(truth) == 0:
        raise ValueError("episode: it has no query images to score")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"predictions: got dtype {labels.dtype}, expected integer labels")
    bad = labels[(labels < 0) | (labels >= ways)]
    if bad.size:
        raise ValueError(f"predictions: got label {int(bad[0])}, expected 0 to {ways - 1}")
    values = {"accuracy": float(np.mean(labels == truth))}
    for name, value in dict(metrics or {}).items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metrics: got name {name!r}, expected a non-empty string")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"metrics: {name!r} got {value!r}, expected a number") from None
        if not math.isfinite(number):
            raise ValueError(f"metrics: {name!r} got {number}, expected a finite number")
        values[name] = number
    return pb.MetricReport(
        run_id=run_id, protocol=MD, source=source, split=request.split, seed=request.seed, index=index,
        fingerprint=fingerprint, metrics=values, request=request, predicted_labels=[int(label) for label in labels],
    )


def run_config_json(run_config: Mapping[str, Any] | None) -> str:
    """Canonical JSON of a run configuration (sorted keys), "" for none."""
    if run_config is None:
        return ""
    try:
        return json.dumps(dict(run_config), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"run_config: not JSON-serialisable ({error})") from None


class Reporter:
    """Collects episode reports of one run and sends them ``batch`` at a time.

    Use as a context manager (pending reports are sent on a normal exit) or call
    ``flush()``. The run configuration travels with every call (the server keeps the
    first and accepts the identical one again). ``stored`` and ``duplicates`` count
    what the server acknowledged.
    """

    def __init__(self, client: Rpc, run_id: str, *, run_config: Mapping[str, Any] | None = None,
                 batch: int = 50) -> None:
        if batch < 1:
            raise ValueError(f"batch: got {batch}, expected at least 1")
        self.client = client
        self.run_id = run_id
        self.config_json = run_config_json(run_config)
        self.batch = batch
        self.stored = 0
        self.duplicates = 0
        self._pending: list[pb.MetricReport] = []

    @property
    def pending(self) -> int:
        """Reports built but not sent yet."""
        return len(self._pending)

    def add(self, episode: ReportableEpisode | Mapping[str, Any], predictions: Any,
            metrics: Mapping[str, float] | None = None) -> float:
        """Queue the report of an evaluated episode (sent once ``batch`` are queued);
        returns its accuracy. Arguments as in ``SamplerClient.report_episode``."""
        report = episode_report(self.run_id, episode, predictions, metrics)
        self._pending.append(report)
        if len(self._pending) >= self.batch:
            self.flush()
        return report.metrics["accuracy"]

    def flush(self) -> None:
        """Send the queued reports (one ReportMetrics call)."""
        if not self._pending:
            return
        reply = self.client.report(self._pending, run_config_json=self.config_json)
        if reply.stored + reply.duplicates != len(self._pending):
            raise SamplerClientError(
                f"ReportMetrics kept {reply.stored + reply.duplicates} of {len(self._pending)} reports")
        self.stored += reply.stored
        self.duplicates += reply.duplicates
        self._pending = []

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.flush()
