"""The lookahead budget comes back, whole, however a stream ends.

A stream starts episodes ahead of their turn only while the server's ``LookaheadBudget``
has room, and charges a packed copy of its next reply to it too. The defect this
guards: an episode started ahead was taken off the stream's books before its reply was
built, so a reply that failed there (a damaged record found by the decode workers)
kept its bytes charged for the life of the server; every such stream left the budget
smaller, until no stream prepared anything ahead. Here the budget is checked back at
zero after streams end in every way they can: read to the end, cancelled by their
client, past their deadline, cancelled by the watchdog or to make room, refused, on
a damaged record (found while reading or while decoding), closed early, and while
the server drains. First the ledger alone (``service.lookahead``), then the engine with
scripted episodes (hypothesis picks sizes, failures and endings), then a real server on
127.0.0.1.
"""

from __future__ import annotations

import gc
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import grpc
import pytest
from conftest import examples, pack_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_flipped_bytes import flip_bytes

from sampler_server.errors import DataLoss, ResourceExhausted, SamplerError
from sampler_server.service.admission import LookaheadBudget, StreamAdmission
from sampler_server.service.limits import ServiceLimits
from sampler_server.service.lookahead import Lookahead
from sampler_server.service.server import RunningServer, ServerConfig
from sampler_server.service.stream import Prepared, StreamEnd, StreamEngine
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb
from sampler_common.wire.gen.sampler.v1 import sampler_pb2_grpc as pb_grpc

# ---- the ledger alone ------------------------------------------------------------------------


class Episode:
    """Stands for a ``stream.Prepared``: ``estimate`` bytes before start, ``size`` after."""

    def __init__(self, estimate: int, size: int | None = None, fails: bool = False) -> None:
        self.nbytes = estimate
        self.size = estimate if size is None else size
        self.fails = fails
        self.started = self.discarded = False

    def start(self) -> "Episode":
        if self.fails:
            raise DataLoss("record 7: checksum mismatch")
        self.started = True
        self.nbytes = self.size
        return self

    def discard(self) -> None:
        self.discarded = True


def test_episodes_start_ahead_while_the_budget_has_room_and_an_empty_budget_never_refuses():
    budget = LookaheadBudget(10)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    assert ahead.start_ahead(0, Episode(30))  # larger than the budget: fits an empty one
    refused = Episode(1)
    assert not ahead.start_ahead(1, refused)
    assert not refused.started and budget.used == ahead.held == 30 and len(ahead) == 1
    assert ahead.head().index == 0


def test_an_estimate_becomes_the_started_size():
    budget = LookaheadBudget(100)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    assert ahead.start_ahead(0, Episode(10, size=25)) and ahead.start_ahead(1, Episode(10, size=4))
    assert [entry.charge for entry in (ahead.head(),)] == [25] and budget.used == ahead.held == 29


def test_a_failed_start_holds_nothing():
    budget = LookaheadBudget(100)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    with pytest.raises(DataLoss):
        ahead.start_ahead(0, Episode(10, fails=True))
    with pytest.raises(DataLoss):
        ahead.start_due(0, Episode(10, fails=True))
    assert budget.used == ahead.held == 0 and len(ahead) == 0


def test_an_episode_started_on_its_turn_is_charged_nothing():
    budget = LookaheadBudget(10)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=1)
    ahead.start_due(0, Episode(50))
    assert ahead.full and budget.used == 0 and ahead.head().charge == 0


def test_a_taken_episode_keeps_its_charge_until_handed_over():
    budget = LookaheadBudget(100)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    ahead.start_ahead(0, Episode(10))
    ahead.start_ahead(1, Episode(20))
    taken = ahead.take_head()
    assert taken.nbytes == 10 and budget.used == ahead.held == 30 and len(ahead) == 1
    ahead.handed_over()
    assert budget.used == ahead.held == 20
    assert ahead.take_packed(20)  # the head's packed copy, built while the taken one is sent
    ahead.take_head()
    assert budget.used == ahead.held == 40  # episode 1 and its packed copy
    ahead.handed_over()  # the taken episode and its packed copy go together
    assert budget.used == ahead.held == 0


def test_a_packed_copy_waits_for_room_and_is_given_back_when_dropped():
    budget = LookaheadBudget(25)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    ahead.start_ahead(0, Episode(20))
    assert not ahead.take_packed(20) and budget.used == 20
    assert ahead.take_packed(5) and budget.used == ahead.held == 25
    ahead.drop_packed()
    assert budget.used == ahead.held == 20


def test_shedding_drops_every_episode_ahead_and_names_them_in_order():
    budget = LookaheadBudget(100)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    episodes = [Episode(10), Episode(10), Episode(10)]
    for index, episode in zip((4, 6, 8), episodes):
        ahead.start_ahead(index, episode)
    assert ahead.shed() == [4, 6, 8]
    assert all(e.discarded for e in episodes) and budget.used == ahead.held == 0 and len(ahead) == 0
    assert ahead.shed() == []


def test_closing_after_a_reply_failed_gives_back_the_taken_episode():
    """The leak this module closes: a reply that failed while being built (a damaged
    record found by the decode workers) kept its episode's charge for good."""
    budget = LookaheadBudget(100)
    ahead: Lookahead[Episode] = Lookahead(budget, depth=3)
    ahead.start_ahead(0, Episode(10))
    ahead.start_ahead(1, Episode(15))
    taken = ahead.take_head()  # ... and building its reply raises
    ahead.close()
    assert taken.discarded and budget.used == ahead.held == 0 and len(ahead) == 0


def test_closing_gives_back_even_when_freeing_fails():
    class Stuck(Episode):
        def discard(self) -> None:
            raise RuntimeError("a worker buffer could not be released")

    budget = LookaheadBudget(100)
    ahead: Lookahead[Stuck] = Lookahead(budget, depth=3)
    ahead.start_ahead(0, Stuck(10))
    ahead.start_ahead(1, Stuck(10))
    with pytest.raises(RuntimeError):
        ahead.close()
    assert budget.used == 0


class LedgerMachine(RuleBasedStateMachine):
    """Any sequence of what a stream does with its lookahead, then it ends (``close``):
    the budget always holds exactly the stream's ``held``, and nothing once it ends. Two
    streams share the budget, so one's refusals come from the other's charges."""

    def __init__(self) -> None:
        super().__init__()
        self.budget = LookaheadBudget(64)
        self.streams: list[Lookahead[Episode]] = [Lookahead(self.budget, 3), Lookahead(self.budget, 2)]
        self.taken: list[Episode | None] = [None, None]
        self.started: list[Episode] = []
        self.sent: list[Episode] = []
        self.next_index = [0, 0]

    @rule(which=st.integers(0, 1), estimate=st.integers(0, 40), size=st.integers(0, 40), fails=st.booleans(),
          due=st.booleans())
    def start(self, which: int, estimate: int, size: int, fails: bool, due: bool) -> None:
        ahead = self.streams[which]
        if ahead.full:
            return
        episode = Episode(estimate, size, fails)
        index = self.next_index[which]
        try:
            if due:
                ahead.start_due(index, episode)
            else:
                ahead.start_ahead(index, episode)
        except DataLoss:
            return
        if episode.started:
            self.started.append(episode)
            self.next_index[which] += 1

    @rule(which=st.integers(0, 1))
    def take(self, which: int) -> None:
        if len(self.streams[which]) and self.taken[which] is None:
            self.taken[which] = self.streams[which].take_head()

    @rule(which=st.integers(0, 1), nbytes=st.integers(0, 40))
    def pack(self, which: int, nbytes: int) -> None:
        if self.streams[which].head() is not None:
            self.streams[which].take_packed(nbytes)

    @rule(which=st.integers(0, 1))
    def drop_packed(self, which: int) -> None:
        self.streams[which].drop_packed()

    @rule(which=st.integers(0, 1))
    def hand_over(self, which: int) -> None:
        if self.taken[which] is not None:
            self.sent.append(self.taken[which])
            self.taken[which] = None
            self.streams[which].handed_over()

    @rule(which=st.integers(0, 1))
    def shed(self, which: int) -> None:
        self.streams[which].drop_packed()
        self.streams[which].shed()

    @precondition(lambda self: any(self.streams))
    @rule(which=st.integers(0, 1))
    def end(self, which: int) -> None:
        """A stream ends, however it ends, and another takes its place."""
        self.streams[which].close()
        self.taken[which] = None
        self.streams[which] = Lookahead(self.budget, 3 - which)

    @invariant()
    def the_budget_holds_what_the_streams_hold(self) -> None:
        assert all(ahead.held >= 0 for ahead in self.streams)
        assert self.budget.used == sum(ahead.held for ahead in self.streams)

    def teardown(self) -> None:
        for ahead in self.streams:
            ahead.close()
        assert self.budget.used == 0
        assert all(e.discarded or e in self.sent for e in self.started)


LedgerMachine.TestCase.settings = settings(max_examples=examples(150), stateful_step_count=30, deadline=None,
                                           database=None)
test_the_ledger_gives_everything_back_however_a_stream_ends = LedgerMachine.TestCase


# ---- through the engine, with scripted episodes ------------------------------------------


@dataclass(frozen=True)
class Script:
    """How one index behaves: its size before start (an encoded episode's estimate) and
    after, and where it fails, if it does."""

    estimate: int
    size: int
    fails: str | None  # "prepare" (sampling), "start" (reading), "finish" (decoding) or None


class _Pending:
    """What a started episode holds until it is sent or discarded."""

    def discard(self) -> None:
        pass


def _prepare(scripts: list[Script]):
    def prepare(index: int) -> Prepared:
        script = scripts[index]
        if script.fails == "prepare":
            raise ResourceExhausted(f"episode {index} would not fit one message")

        def finish() -> bytes:
            if script.fails == "finish":
                raise DataLoss(f"record of episode {index}: checksum mismatch")
            return b"%d" % index

        def begin():
            if script.fails == "start":
                raise DataLoss(f"record of episode {index}: checksum mismatch")
            return finish, _Pending(), script.size

        return Prepared(SimpleNamespace(last=False), script.estimate, begin)

    return prepare


ENDINGS = ("read", "shed", "close", "release", "drain")

scripts = st.lists(st.builds(Script, st.integers(1, 40), st.integers(1, 40),
                             st.sampled_from((None, None, None, None, "prepare", "start", "finish"))),
                   min_size=1, max_size=8)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(scripts=scripts, limit=st.integers(1, 120), depth=st.integers(1, 4),
       after=st.lists(st.sampled_from(ENDINGS), max_size=8))
def test_the_engine_gives_the_budget_back_however_a_stream_ends(scripts, limit, depth, after):
    """``after[k]``: what happens once reply k is with gRPC: its client reads on, the
    watchdog sheds the stream's lookahead (then it reads on), the generator is closed
    (a cancelled or timed-out call), the call ends while the stream carries on (it
    returns at its next wait for room), or the server drains. Past ``after``: read on."""
    budget = LookaheadBudget(limit)
    admission = StreamAdmission(max_streams=1, max_streams_per_client=1, idle_seconds=60)
    end = StreamEnd(admission.admit("ipv4:127.0.0.1", lambda: None), "stream test", "ipv4:127.0.0.1:1")
    draining = threading.Event()
    # a stream reads no store (its episodes are scripted) and has no same-host transport
    engine = StreamEngine(None, ServiceLimits(lookahead=depth), admission, budget, None,  # type: ignore[arg-type]
                          draining)
    replies = engine.stream(end, _prepare(scripts), 0, len(scripts), 1, "scripted")
    sent: list[bytes] = []
    try:
        for k in range(len(scripts)):
            sent.append(next(replies).take())
            assert budget.used >= 0
            action = after[k] if k < len(after) else "read"
            if action == "shed":
                assert end.slot.shed is not None
                end.slot.shed()
                assert budget.used == 0  # what it prepared ahead is dropped while its client reads nothing
            elif action == "close":
                replies.close()
                break
            elif action == "release":
                end()
            elif action == "drain":
                draining.set()
        else:
            next(replies, None)
    except (StopIteration, SamplerError):
        pass
    replies.close()
    assert budget.used == 0, f"{budget.used} bytes still charged after the stream ended"
    assert sent == [b"%d" % i for i in range(len(sent))]  # in order, shed or not
    assert admission.open_streams == 0


# ---- through a real server ----------------------------------------------------------------

SIZE = 84  # large enough that a client reading nothing stops the stream in a send
SHED_SECONDS = 0.3
IDLE_SECONDS = 2.5


@pytest.fixture(scope="module")
def stores(served, tmp_path_factory):
    """A data directory with the pristine 'folder' store and 'damaged', the same images
    with a byte flipped in every record."""
    data = tmp_path_factory.mktemp("lookahead") / "data"
    shutil.copytree(served.data / "folder", data / "folder")
    damaged = pack_fixture(served.fixture, data, name="damaged")
    flip_bytes(damaged.store_dir, list(range(damaged.manifest.num_records)))
    return data


@pytest.fixture(scope="module")
def server(stores, tmp_path_factory):
    limits = ServiceLimits(max_streams=3, max_streams_per_client=3, stream_shed_seconds=SHED_SECONDS,
                           stream_idle_seconds=IDLE_SECONDS, send_bytes=1)
    running = RunningServer(ServerConfig(data_dir=stores, port=0, workers=2, threads=4, limits=limits,
                                         metrics_path=tmp_path_factory.mktemp("metrics") / "m.sqlite",
                                         grace_seconds=0.5)).start()
    yield running
    running.stop(grace=0.5)


def _stream(store: str = "folder", count: int = 0, mode: int = pb.IMAGE_MODE_DECODED, seed: int = 3):
    return pb.StreamEpisodesRequest(
        request=pb.EpisodeRequest(sources=[store], split=pb.SPLIT_TRAIN, seed=seed,
                                  images=pb.ImageOptions(image_size=SIZE, mode=mode)),
        count=count)


def _settled(server: RunningServer, timeout: float = 15.0) -> int:
    """The lookahead budget in use once every stream of ``server`` has ended. A call ends
    (its slot is freed) before its stream's generator is closed, which gives the budget
    back: a moment later, when gRPC's thread leaves the send it was blocked in. A leak
    stays for good."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.servicer.admission.open_streams:
        time.sleep(0.05)
    assert server.servicer.admission.open_streams == 0, "a stream never ended"
    while time.monotonic() < deadline and server.servicer.lookahead_budget.used:
        gc.collect()  # a stopped server's gRPC threads drop a stream without closing it: its finally runs when collected
        time.sleep(0.05)
    return server.servicer.lookahead_budget.used


def _held_ahead(server: RunningServer, timeout: float = 10.0) -> int:
    """The budget in use once a stream has prepared something ahead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not server.servicer.lookahead_budget.used:
        time.sleep(0.02)
    return server.servicer.lookahead_budget.used


def _stuck_in_a_send(server: RunningServer, timeout: float = 10.0) -> None:
    """Until the one open stream is stuck in a send: the watchdog shed its lookahead, which
    it does only to a stream whose send made no progress for SHED_SECONDS."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.servicer.lookahead_budget.used:
        time.sleep(0.02)
    assert server.servicer.lookahead_budget.used == 0, "the stream never stopped in a send"
    assert server.servicer.admission.open_streams == 1


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        for _ in call:
            pass
    return caught.value.code()


def _read_to_the_end(stub, server) -> None:
    got = [m.index for m in stub.StreamEpisodes(_stream(count=6), timeout=30)]
    assert got == list(range(6))


def _cancelled_by_its_client(stub, server) -> None:
    call = stub.StreamEpisodes(_stream())
    next(call)
    assert _held_ahead(server)
    call.cancel()
    assert _code(call) == grpc.StatusCode.CANCELLED


def _past_its_deadline(stub, server) -> None:
    call = stub.StreamEpisodes(_stream(), timeout=1.0)
    next(call)  # then read nothing until the deadline
    assert _held_ahead(server)
    time.sleep(1.5)
    assert _code(call) == grpc.StatusCode.DEADLINE_EXCEEDED


def _shed_then_read_on(stub, server) -> None:
    call = stub.StreamEpisodes(_stream(count=8))
    got = [next(call).index]
    assert _held_ahead(server)
    _stuck_in_a_send(server)  # the watchdog dropped what the stream prepared ahead
    got += [m.index for m in call]
    assert got == list(range(8))


def _cancelled_by_the_watchdog(stub, server) -> None:
    call = stub.StreamEpisodes(_stream())
    next(call)  # then read nothing: shed, then cancelled as idle
    deadline = time.monotonic() + IDLE_SECONDS + 15
    while time.monotonic() < deadline and server.servicer.admission.open_streams:
        time.sleep(0.05)
    assert _code(call) == grpc.StatusCode.CANCELLED


def _cancelled_to_make_room(stub, server, caplog) -> None:
    stalled = stub.StreamEpisodes(_stream())
    next(stalled)  # then read nothing: a reply stuck in a send holds the send budget's room
    assert _held_ahead(server)
    _stuck_in_a_send(server)
    with caplog.at_level(logging.WARNING, logger="sampler_server.service"):
        got = [m.index for m in stub.StreamEpisodes(_stream(count=3, seed=4), timeout=30)]
    assert got == [0, 1, 2]
    assert any("sending to a client that does not read" in r.getMessage() for r in caplog.records)
    assert _code(stalled) == grpc.StatusCode.CANCELLED


def _refused_while_others_stream(stub, server) -> None:
    held = [stub.StreamEpisodes(_stream(seed=s)) for s in range(3)]
    for call in held:
        next(call)
    with pytest.raises(grpc.RpcError) as caught:
        next(stub.StreamEpisodes(_stream(seed=9)))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for call in held:
        call.cancel()


def _damaged_record_found_decoding(stub, server) -> None:
    assert _code(stub.StreamEpisodes(_stream("damaged", count=4))) == grpc.StatusCode.DATA_LOSS


def _damaged_record_found_reading(stub, server) -> None:
    call = stub.StreamEpisodes(_stream("damaged", count=4, mode=pb.IMAGE_MODE_ENCODED))
    assert _code(call) == grpc.StatusCode.DATA_LOSS


def _closed_with_its_channel(stub, server) -> None:
    channel = grpc.insecure_channel(server.address)
    call = pb_grpc.SamplerStub(channel).StreamEpisodes(_stream())
    next(call)
    assert _held_ahead(server)
    channel.close()


ENDS = {
    "read to the end": _read_to_the_end,
    "cancelled by its client": _cancelled_by_its_client,
    "past its deadline": _past_its_deadline,
    "shed, then read on": _shed_then_read_on,
    "cancelled by the watchdog": _cancelled_by_the_watchdog,
    "cancelled to make room": _cancelled_to_make_room,
    "refused while others stream": _refused_while_others_stream,
    "damaged record found decoding": _damaged_record_found_decoding,
    "damaged record found reading": _damaged_record_found_reading,
    "closed with its channel": _closed_with_its_channel,
}


@pytest.mark.parametrize("how", list(ENDS))
def test_the_servers_budget_is_back_to_zero_after_a_stream_ends(server, how, caplog):
    assert _settled(server) == 0  # nothing left from before
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.SamplerStub(channel)
        end = ENDS[how]
        end(stub, server, caplog) if how == "cancelled to make room" else end(stub, server)
        assert _settled(server) == 0, f"{server.servicer.lookahead_budget.used} bytes still charged"


def test_a_draining_server_gives_the_budget_back(served, tmp_path):
    running = RunningServer(ServerConfig(data_dir=served.data, port=0, workers=2, threads=4,
                                         metrics_path=tmp_path / "m.sqlite", grace_seconds=0.5)).start()
    try:
        with grpc.insecure_channel(running.address) as channel:
            calls = [pb_grpc.SamplerStub(channel).StreamEpisodes(_stream(seed=s)) for s in range(2)]
            for call in calls:
                next(call)
            assert _held_ahead(running)
            running.stop(grace=0.5)
            for call in calls:
                assert _code(call) in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert _settled(running) == 0
    finally:
        running.stop(grace=0.5)
