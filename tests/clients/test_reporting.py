"""Reporting an evaluated episode in one call: the client builds the report (key,
fingerprint, request, accuracy from the predictions) and the request itself; the
server stores it, checks its fingerprint, and a resent report is a duplicate. Source
names travel to the server unchanged: store names and source kinds both resolve there."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clients.core import EpisodeSpec, Reporter, SamplerClient, SamplerClientError

SPEC = EpisodeSpec(sources=("folder",), split="test", seed=9, image_size=16)


def _stored(served, run: str) -> list:
    return list(served.server.metrics.reports(run))


def test_report_episode_builds_the_report_from_the_episode(served):
    with SamplerClient(served.address) as client:
        episode = client.episode(SPEC, 3)
        truth = episode.query_labels
        predictions = np.where(np.arange(len(truth)) % 2 == 0, truth, (truth + 1) % episode.ways)
        reply = client.report_episode("user-one-call", episode, predictions, {"loss": 0.5},
                                      run_config={"model": "mine", "lr": 0.1})
        assert (reply.stored, reply.duplicates) == (1, 0)
        again = client.report_episode("user-one-call", episode, predictions.tolist(), {"loss": 0.5},
                                      run_config={"model": "mine", "lr": 0.1})
        assert (again.stored, again.duplicates) == (0, 1)
    [stored] = _stored(served, "user-one-call")
    expected_accuracy = float(np.mean(predictions == truth))
    assert stored.metrics == {"accuracy": pytest.approx(expected_accuracy), "loss": 0.5}
    assert (stored.protocol, stored.split, stored.seed, stored.index) == ("md-episode", "test", 9, 3)
    assert stored.fingerprint == episode.fingerprint and stored.source == episode.source
    assert list(stored.predicted) == predictions.tolist()
    assert stored.request["sources"] == ["folder"] and stored.request["seed"] == "9"
    assert served.server.metrics.run_config("user-one-call") == {"model": "mine", "lr": 0.1}


def test_reporter_batches_streamed_episodes_and_counts(served):
    with SamplerClient(served.address) as client:
        with Reporter(client, "user-reporter", run_config={"model": "mine"}, batch=2) as reporter:
            for episode in client.episodes(SPEC, start=0, count=5):
                assert episode.request is not None and episode.preset == "md-v1"
                reporter.add(episode, episode.query_labels)  # perfect predictions
            assert reporter.pending == 1 and reporter.stored == 4
        assert (reporter.stored, reporter.duplicates, reporter.pending) == (5, 0, 0)
    stored = _stored(served, "user-reporter")
    assert [r.index for r in stored] == list(range(5))
    assert all(r.metrics == {"accuracy": 1.0} for r in stored)


def test_bad_reports_are_refused_before_sending(served):
    with SamplerClient(served.address) as client:
        episode = client.episode(SPEC, 0)
        with pytest.raises(ValueError, match=f"predictions: got 2 labels, expected {len(episode.query_labels)}"):
            client.report_episode("user-bad", episode, [0, 1])
        with pytest.raises(ValueError, match=r"predictions: got label 99, expected 0 to \d+"):
            client.report_episode("user-bad", episode, [99] * len(episode.query_labels))
        with pytest.raises(ValueError, match="metrics: 'loss' got nan"):
            client.report_episode("user-bad", episode, episode.query_labels, {"loss": float("nan")})
        with pytest.raises(ValueError, match="run_config"):
            client.report_episode("user-bad", episode, episode.query_labels, run_config={"f": object()})
        # a different result for a reported episode is the server's refusal, with its message
        client.report_episode("user-bad", episode, episode.query_labels)
        with pytest.raises(SamplerClientError, match="FAILED_PRECONDITION"):
            client.report_episode("user-bad", episode, (episode.query_labels + 1) % episode.ways)


def test_a_resent_run_config_must_be_identical(served):
    """The server keeps a run's configuration once; a different one for the run is refused
    (waits for the server change that makes the first configuration win)."""
    with SamplerClient(served.address) as client:
        episode = client.episode(SPEC, 1)
        client.report_episode("user-config", episode, episode.query_labels, run_config={"a": 1})
        with pytest.raises(SamplerClientError, match="FAILED_PRECONDITION"):
            client.report_episode("user-config", episode, episode.query_labels, run_config={"a": 2})
    assert json.dumps(served.server.metrics.run_config("user-config")) == '{"a": 1}'


def test_source_kinds_and_store_names_resolve_on_the_server(served):
    with SamplerClient(served.address) as client:
        by_store = client.episode(SPEC, 2)
        by_kind = client.episode(EpisodeSpec(sources=("image_folder",), split="test", seed=9, image_size=16), 2)
        assert by_kind.fingerprint == by_store.fingerprint and by_kind.source == "image_folder"
        batch = next(iter(client.batches("image_folder", "train", 4, image_size=16, count=1)))
        assert batch.index == 0 and batch.images.shape == (4, 16, 16, 3)


def test_preset_with_sources_selects_the_class_splits(served):
    """sources + preset together (waits for the server change that accepts both)."""
    with SamplerClient(served.address) as client:
        v1 = client.episode(SPEC, 0)
        v2 = client.episode(EpisodeSpec(sources=("folder",), preset="md-v2", split="test", seed=9, image_size=16), 0)
        assert (v1.preset, v2.preset) == ("md-v1", "md-v2")
        assert v2.request.preset == "md-v2" and list(v2.request.sources) == ["folder"]
        # a store without a WordNet split keeps its classes under either variant
        assert v1.class_ids == v2.class_ids
        batch = next(iter(client.batches("folder", "train", 4, image_size=16, count=1, preset="md-v2")))
        assert batch.images.shape[0] == 4
