"""A real PostgreSQL for the metrics tests: one cluster per test session, a fresh database
per test module.

The cluster is made by ``initdb`` in a temporary folder and started by ``pg_ctl`` on a
free 127.0.0.1 port, with trust authentication and no fsync (nothing here must survive a
crash). PostgreSQL refuses to run as root, so under root (CI) it runs as the ``postgres``
user that Debian's package creates. ``make test`` installs PostgreSQL where it is missing;
without it these tests fail, unless $SAMPLER_TESTS_WITHOUT_POSTGRES=1 says this checkout
deliberately has none (then they skip).
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prerequisites import missing

OPT_OUT_VARIABLE = "SAMPLER_TESTS_WITHOUT_POSTGRES"


def _binaries() -> Path | None:
    """The folder of initdb, pg_ctl and postgres: on PATH, else Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """An initdb'd cluster in a temporary folder, started on a free port of 127.0.0.1."""

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.port = _free_port()
        root = os.geteuid() == 0
        self.folder = Path(tempfile.mkdtemp(prefix="sampler-pg-", dir="/tmp" if root else None))  # postgres reaches it
        self.data = self.folder / "data"
        self._as_postgres: list[str] = []
        if root:
            import pwd

            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("PostgreSQL refuses to run as root and there is no postgres user; "
                            "install Debian's postgresql package (make test does)")
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            # runuser, not subprocess's user=: that makes Python fork() instead of vfork(), and a
            # fork runs gRPC's fork handlers, which abort while a server in this process runs
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale",
                  "--locale-provider=icu", "--icu-locale=en-US", "--no-sync")
        self.start()

    def _run(self, program: str, *arguments: str) -> None:
        done = subprocess.run([*self._as_postgres, str(self.binaries / program), *arguments], capture_output=True,
                              text=True, cwd=self.folder, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c full_page_writes=off -c max_connections=60")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self) -> None:
        """Stop at once, as a crash would: clients see their connections drop."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, name: str) -> str:
        """A fresh, empty database; its URL."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        try:
            self.stop()
        except (RuntimeError, subprocess.TimeoutExpired):
            pass  # not running
        shutil.rmtree(self.folder, ignore_errors=True)


_CLUSTER: list[Cluster] = []


def cluster() -> Cluster:
    """The session's cluster, started on first use and removed when the tests end."""
    if not _CLUSTER:
        binaries = _binaries()
        if binaries is None:
            missing(OPT_OUT_VARIABLE, "PostgreSQL's initdb is not installed (make test installs it: apt-get install postgresql)")
        _CLUSTER.append(Cluster(binaries))
        atexit.register(_CLUSTER[0].remove)
    return _CLUSTER[0]


@pytest.fixture(scope="module")
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a fresh database for this test module."""
    name = "m_" + re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1]).lower()
    yield cluster().create_database(name)


TABLES = ("runs", "reports", "task_results", "cog_results")


@pytest.fixture(params=["sqlite", "postgresql"])
def metrics_target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's MetricsStore lives: a new SQLite file, or the module's PostgreSQL
    database emptied for this test; reopening the same target sees what was stored."""
    if request.param == "sqlite":
        return tmp_path / "m.sqlite"
    url = request.getfixturevalue("postgres_url")
    existing = {row[0] for row in cluster().execute("SELECT tablename FROM pg_tables", url.rsplit("/", 1)[1])}
    if set(TABLES) <= existing:
        cluster().execute(f"TRUNCATE {', '.join(TABLES)}", url.rsplit("/", 1)[1])
    return url
