"""Shared test helpers: paths to ../shared/reference and packing a generated fixture."""

from __future__ import annotations

import gc

gc.disable()  # until the tests start: see pytest_runtestloop

import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import loader_workers
import pytest
from hypothesis import settings
from prerequisites import missing
from sampler_server import fixtures
from sampler_server.fixtures.base import Fixture
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, PackSummary, run_pack
from sampler_server.pack.plan import ConverterOptions

REPO_ROOT = Path(__file__).resolve().parents[1]

# The suite's Hypothesis profile: no deadline (a loaded 2-core runner makes any per-example
# bound flaky; the properties are about values, not speed) and no example database (a run
# does not depend on what an earlier run found, and writes nothing into the clone). `make
# check` loads "check": a tenth of each property's examples (``examples``), 10 by default.
settings.register_profile("suite", deadline=None, database=None)
settings.register_profile("check", parent=settings.get_profile("suite"), max_examples=10)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "suite")
settings.load_profile(PROFILE)


def examples(count: int) -> int:
    """A property's example count: ``count`` in the suite, a tenth of it (at least 10) under
    the "check" profile, which `make check` loads."""
    return max(10, count // 10) if PROFILE == "check" else count
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"


SKIP_LOG_VARIABLE = "SAMPLER_TESTS_SKIP_LOG"
"""A file to append each skipped test's ``node id<TAB>reason`` to (.ci/run's skip gate reads it)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the process that reports (not in a pytest-xdist worker, whose reports reach it)."""
    _record_duration(report)
    log = os.environ.get(SKIP_LOG_VARIABLE)
    if not log or not report.skipped or hasattr(report, "wasxfail") or not _reporting_process():
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ").replace("\t", " ").replace("\n", " ")
    with open(log, "a") as file:
        file.write(f"{report.nodeid}\t{reason}\n")


DURATIONS_VARIABLE, PART_VARIABLE = "SAMPLER_TESTS_DURATIONS", "SAMPLER_TESTS_PART"
_FILE_SECONDS: dict[str, float] = {}
_SESSION_START: list[float] = []


def _reporting_process() -> bool:
    return not os.environ.get("PYTEST_XDIST_WORKER")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """The collector was held off while the test modules imported (TensorFlow, PyTorch,
    the project): scanning that heap again and again frees nothing. It is frozen out of
    later passes, as a program's entry does (``sampler_common.startup``), then the
    collector runs for what the tests create, a full pass at most every 100 passes of the
    middle generation, not 10: after the freeze the unfrozen heap is small, so a quarter of it
    (Python's other condition for a full pass) is soon reached, and each full pass re-scanned
    the modules the tests import lazily (collection 4.4 s -> 1.7 s of four files' CPU, 13
    full passes -> 2). The DataLoader workers' forkserver starts first (``loader_workers``): before any
    test's server starts it with a shorter list."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 100)
    gc.enable()
    loader_workers.start_forkserver({getattr(item, "module", None) for item in session.items})


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A pytest-xdist worker ends here, at once: its reports and "workerfinished" are sent
    (pytest_sessionfinish), after which the controller takes its exit for a normal one. The
    interpreter's own teardown of a heap that holds TensorFlow, PyTorch and every module the
    tests imported kept one core busy for 10-32 s while the run waited for it (measured on
    `make test`'s parallel part); the processes a test left are this process's children and
    end with it (the forkserver and the resource tracker read EOF)."""
    if hasattr(config, "workerinput"):
        import logging
        import sys

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the longest files first (their seconds in tests/durations.json,
    for this part): `--dist loadfile` hands each worker the next whole file as it frees up, in
    this order (the Makefile turns off xdist's own, by test count), so a long file is not left to
    start near the end while the other worker runs out of files. Every worker sorts the same way,
    and a file's tests keep their order."""
    if not hasattr(config, "workerinput"):
        return
    import durations

    part = "check" if PROFILE == "check" else "test-parallel"
    seconds = durations.load().get("parts", {}).get(part, {}).get("files", {})
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_START.append(time.monotonic())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Merge the run's seconds per test file (and, for a whole part, its wall clock) into the
    record $SAMPLER_TESTS_DURATIONS names (``make durations``; tests/durations.py)."""
    path = os.environ.get(DURATIONS_VARIABLE)
    if not path or not _reporting_process() or not _FILE_SECONDS:
        return
    import durations

    wall = time.monotonic() - _SESSION_START[0] if os.environ.get("SAMPLER_TESTS_WALL") == "1" else None
    part = os.environ.get(PART_VARIABLE, "test-parallel")
    durations.save(durations.merge(durations.load(Path(path)), part, _FILE_SECONDS, wall), Path(path))


def _record_duration(report: pytest.TestReport) -> None:
    if os.environ.get(DURATIONS_VARIABLE) and _reporting_process():
        name = report.nodeid.split("::", 1)[0]
        _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + report.duration


def require_reference(relative: str | Path = "") -> Path:
    """The path under ../shared/reference a test reads. Missing, the test FAILS (CI always
    has ../shared beside the repo, so a skip there would let the test pass vacuously),
    unless $SAMPLER_TESTS_WITHOUT_SHARED=1 says this checkout deliberately has none."""
    path = SHARED_REFERENCE / relative
    if not path.exists():
        missing("SAMPLER_TESTS_WITHOUT_SHARED", f"{path} is missing: CI provides ../shared beside the repo")
    return path


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    """One torch thread for the test, restored after (trainer runs in it pass ``--threads 1``):
    ``make test`` runs two test processes on two cores, and a second thread there spins waiting
    for a core (it took a conv4 step 3 to 7 times the CPU time of one thread)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_core() -> Iterator[None]:
    """One core for this test's process and the processes it starts, for code run as a reader
    runs it (no ``--threads``): the trainers' default thread count is the cores a process may
    use, and under ``make test`` the other worker has the other core, where a second thread
    would only spin (the quickstart's run took a quarter less CPU pinned). What an in-process
    trainer set for torch (its thread count, deterministic algorithms) is put back afterwards."""
    cores = os.sched_getaffinity(0)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    torch = sys.modules.get("torch")
    saved = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) if torch else None
    os.sched_setaffinity(0, {sorted(cores)[worker % len(cores)]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)
        torch = sys.modules.get("torch")
        if torch is not None:
            threads, deterministic = saved or (len(cores), False)
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    return require_reference()


KITTI_SIZES = {"train": 800, "validation": 240, "test": 30}
"""The transfer tests' KITTI: VTAB-1k's train800/val200 and a small test split."""


@pytest.fixture(scope="session")
def kitti_served(tmp_path_factory):
    """One served KITTI store (packed by ``pack vtab`` from test-built TFDS data) for every
    transfer test that only reads it; each test reports under run ids of its own."""
    import tfds_builders as tb

    with served_kitti(tb.TestKitti, tmp_path_factory.mktemp("kitti"), KITTI_SIZES) as server:
        yield server


@contextlib.contextmanager
def served_kitti(builder: type, root: Path, sizes: dict[str, int]) -> Iterator[Any]:
    """A KITTI store of ``builder``'s test-built TFDS data at ``sizes`` (one shard), packed by
    ``pack vtab`` once per run (``built_once``), copied under ``root`` (a folder
    ``tmp_path_factory.mktemp`` made) and served on 127.0.0.1 while the block runs."""
    from sampler_server.service.server import RunningServer, ServerConfig

    name = f"kitti-{builder.__name__}-" + "-".join(f"{split}{count}" for split, count in sorted(sizes.items()))
    shutil.copytree(built_once(root.parent, name, lambda folder: _pack_kitti(builder, folder, sizes)) / "data", root / "data")
    server = RunningServer(ServerConfig(data_dir=root / "data", port=0, workers=1, threads=8,
                                        grace_seconds=0.5)).start()
    try:
        yield server
    finally:
        server.stop(grace=0.5)


def _pack_kitti(builder: type, folder: Path, sizes: dict[str, int]) -> None:
    from sampler_server.cli.main import main as server_cli
    from sampler_server.fixtures.tfds import prepare

    prepare(builder, folder / "tfds", shards=1, SIZES=sizes)
    assert server_cli(["pack", "vtab", "--tfds-name", "kitti", "--tfds-data-dir", str(folder / "tfds"),
                       "--output", str(folder / "data"), "--quiet", "--workers", "1"]) == 0


def built_once(basetemp: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``build(folder)`` run once per test run, by the first process that asks, under a lock in
    the folder every pytest-xdist worker of the run shares (the parent of each worker's
    ``basetemp``; the run's own ``basetemp`` without workers); the others wait, then read or
    copy the folder."""
    shared = (basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp) / f"{name}-built"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "done").exists():
            build(shared / name)
            (shared / "done").touch()
    return shared / name


def generate_fixture(source: str, root: Path, **kwargs: Any) -> Fixture:
    return fixtures.get_generator(source).generate(root / "original" / source, **kwargs)


def pack_fixture(
    fixture: Fixture,
    output: Path,
    *,
    use_split_file: bool = True,
    converter_overrides: dict[str, Any] | None = None,
    **pack_kwargs: Any,
) -> PackSummary:
    """Pack a fixture the way ``sampler-server pack`` would (in-process, quiet)."""
    converter_kwargs: dict[str, Any] = dict(fixture.pack_args)
    if use_split_file and fixture.split_file is not None:
        converter_kwargs["class_splits"] = fixture.split_file
    converter_kwargs.update(converter_overrides or {})
    plan = sources.get_converter(fixture.source).plan(fixture.input_dir, ConverterOptions(**converter_kwargs))
    pack_kwargs.setdefault("progress", False)
    pack_kwargs.setdefault("workers", 1)
    return run_pack(plan, output, PackOptions(**pack_kwargs))


# ---- a real server on 127.0.0.1 with stores packed from fixtures -----------------------


class ServedData:
    """Stores packed from a learnable image_folder fixture, and a server over them."""

    def __init__(self, root: Path, *, max_message_bytes: int = 32 << 20, max_streams: int = 8) -> None:
        from sampler_server.service.server import RunningServer, ServerConfig
        from sampler_server.service.limits import ServiceLimits

        self.root = root
        self.fixture = generate_fixture("image_folder", root, num_classes=24, images_per_class=12)
        self.data = root / "data"
        self.encoded = pack_fixture(self.fixture, self.data, name="folder")
        self.raw = pack_fixture(self.fixture, self.data, name="folder_raw32", raw_size=32)
        self.server = RunningServer(
            ServerConfig(
                data_dir=self.data,
                port=0,
                workers=2,
                threads=16,
                limits=ServiceLimits(max_message_bytes=max_message_bytes, max_streams=max_streams),
                grace_seconds=1.0,
            )
        ).start()
        self.address = self.server.address

    def stop(self) -> None:
        self.server.stop(grace=0.5)


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> ServedData:
    served = ServedData(tmp_path_factory.mktemp("served"))
    yield served
    served.stop()


def copy_fixture(fixture: Fixture, tmp_path: Path) -> Fixture:
    """A private copy of a fixture's input, for tests that damage it."""
    import dataclasses
    import shutil

    target = tmp_path / "original" / fixture.input_dir.name
    shutil.copytree(fixture.input_dir, target)
    return dataclasses.replace(fixture, input_dir=target)


def records_by_class(store_dir: Path) -> list[tuple[str, Any]]:
    """(class name, record) for every record of a store, in record-id order."""
    from sampler_server.store.reader import StoreReader

    reader = StoreReader(store_dir)
    return [(info.name, reader.read(record_id)) for info in reader.manifest.classes
            for record_id in range(info.start, info.end)]


def start_serve(data: Path, *flags: str, stderr: Any = None) -> tuple[Any, str]:
    """``sampler-server serve --data DATA --port 0 FLAGS`` as a process: (process, address),
    once it printed its listening line (the caller stops it)."""
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", *flags],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr, text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("listening on 127.0.0.1:"):
        process.kill()
        _, errors = process.communicate(timeout=30)
        raise AssertionError(f"serve did not start: {line}{errors or ''}")
    return process, line.split()[2]


# ---- the stores `make demo` leaves, for the README's and docs' examples ------------------


class DemoData:
    """``demo-data/store`` under ``root`` built by the demo's own data code at the demo's own
    scale (``demo_cmd.build_demo_stores`` with ``demo``'s defaults), and a server over it: the
    README's and docs' examples run against what a reader has after ``make demo``."""

    def __init__(self, root: Path, built: Path | None = None) -> None:
        """``built``: a ``demo-data`` folder built already, copied to ``root`` (each copy's server
        keeps its own metrics beside the stores); else the stores are built under ``root``."""
        from sampler_server.service.server import RunningServer, ServerConfig

        self.root = root  # the reader's clone: `demo-data/store` is relative to it
        if built is None:
            _build_demo_stores(root / "demo-data")
        else:
            shutil.copytree(built, root / "demo-data")
        self.data = root / "demo-data" / "store"
        self.server = RunningServer(ServerConfig(data_dir=self.data, port=0, workers=2, threads=16,
                                                 grace_seconds=1.0)).start()
        self.address = self.server.address

    def stop(self) -> None:
        self.server.stop(grace=0.5)


def _build_demo_stores(workdir: Path) -> None:
    from sampler_server.cli import demo_cmd
    from sampler_server.cli.main import build_parser

    defaults = build_parser().parse_args(["demo"])
    built = demo_cmd.build_demo_stores(workdir, defaults.classes, defaults.images_per_class, workers=2, quiet=True)
    assert built.vtab, "the demo's VTAB stores need tensorflow-datasets (the vtab extra)"
    assert built.store == workdir / "store", built.store


def _demo_stores_built_once(tmp_path_factory) -> Path:
    """The demo's stores (45 s) built by the first pytest-xdist worker that asks; the others copy them."""
    return built_once(tmp_path_factory.getbasetemp(), "demo-data", _build_demo_stores)


@pytest.fixture(scope="session")
def demo_data(request, tmp_path_factory) -> DemoData:
    parallel = hasattr(request.config, "workerinput")  # a pytest-xdist worker
    served = DemoData(tmp_path_factory.mktemp("clone"), _demo_stores_built_once(tmp_path_factory) if parallel else None)
    yield served
    served.stop()
