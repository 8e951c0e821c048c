"""The metrics store in PostgreSQL: one database that every replica of the service writes to.

``serve --metrics postgresql://USER@HOST:PORT/DB`` (and ``report --metrics`` likewise)
keep reports here instead of in a SQLite file. The rules are the SQLite store's
(``metrics.store``): the same keys, duplicates and refusals, one transaction per report
batch. What makes them hold across replicas is that a write transaction locks the rows
of the runs it writes (``SELECT ... FOR UPDATE``, runs in sorted order, so two batches
never wait on each other in a cycle): two replicas writing one run take turns, each
reading what the other committed, while writes to other runs go on in parallel.

The driver is psycopg 3 (the ``postgres`` extra). A connection is opened at start: a
database that cannot be reached then is an error naming ``--metrics``. One lost later
(the database restarted, the network cut) makes each metrics call fail with
``Unavailable`` (UNAVAILABLE: clients retry) until a later call connects again; the
service meanwhile serves episodes as before. Unless the URL sets them, connecting gives
up after 5 s and a silent peer is noticed within about 15 s (TCP keepalives and
``tcp_user_timeout``), so a cut-off database never hangs a call for minutes.

Schema: the tables of ``store_sql`` plus ``metrics_schema(version)``. Replicas starting
together create them once (under an advisory lock); a database already at this version
is only read, so a role without CREATE rights may open it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sampler_server.errors import FailedPrecondition, InvalidArgument, Unavailable
from sampler_server.metrics.store_sql import POSTGRES, SCHEMA_VERSION

SCHEMES = ("postgresql://", "postgres://")
# libpq options set unless the URL sets them: bounded waits for an unreachable database
_DEFAULTS = {"connect_timeout": "5", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3",
             "tcp_user_timeout": "15000", "application_name": "sampler-server"}
_SCHEMA_LOCK = 0x5341_4D50_4C45  # pg_advisory_xact_lock key: one replica at a time creates the tables


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(SCHEMES)


def _one_line(error: BaseException, url: str = "") -> str:
    text = " ".join(str(error).split())
    return text.replace(url, "the URL") if url else text


def parse_url(url: str) -> dict[str, str]:
    """The URL's libpq parameters; ``InvalidArgument`` naming ``--metrics`` when it is not a
    valid PostgreSQL URL or the driver is not installed."""
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise InvalidArgument("--metrics: a postgresql:// URL needs the PostgreSQL driver (psycopg); install "
                              "sampler-server[postgres]") from None
    try:
        parameters = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    except ProgrammingError as error:
        raise InvalidArgument(f"--metrics: not a valid PostgreSQL URL ({_one_line(error, url)})") from None
    for port in parameters.get("port", "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise InvalidArgument(f"--metrics: port: got {port!r} in the PostgreSQL URL, expected 1 to 65535")
    return parameters


def display_name(parameters: dict[str, str]) -> str:
    """The URL without its password (nor any other secret): what messages and logs show."""
    user = f"{parameters['user']}@" if parameters.get("user") else ""
    host = parameters.get("host", "")
    host = f"[{host}]" if ":" in host and "," not in host else host
    port = f":{parameters['port']}" if parameters.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parameters.get('dbname', '')}"


class PostgresDatabase:
    dialect = POSTGRES

    def __init__(self, url: str) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self._psycopg = psycopg
        parameters = parse_url(url)
        self.name = display_name(parameters)
        self._conninfo = make_conninfo(url, **{k: v for k, v in _DEFAULTS.items() if k not in parameters})
        self._connection: Any = None
        try:
            self._migrate()
        except Unavailable as error:
            self.close()
            raise Unavailable(f"--metrics: cannot use {self.name}: {_one_line(error.__cause__ or error)}") from None
        except FailedPrecondition as error:
            self.close()
            raise FailedPrecondition(f"--metrics: {error}") from None

    def _live(self) -> Any:
        """The connection, made anew when there is none or the last one was lost."""
        if self._connection is not None and not self._connection.closed and not self._connection.broken:
            return self._connection
        self.close()
        try:
            self._connection = self._psycopg.connect(self._conninfo, autocommit=True)
        except self._psycopg.OperationalError as error:
            raise self._unavailable(error) from error
        return self._connection

    def _unavailable(self, error: BaseException) -> Unavailable:
        return Unavailable(f"metrics database {self.name} unreachable ({_one_line(error)}); nothing was stored "
                           "or read: retry later")

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        assert "%" not in sql, sql  # the rules' SQL has ? placeholders and no literal %
        connection = self._live()
        try:
            return connection.execute(sql.replace("?", "%s"), tuple(parameters))
        except self._psycopg.OperationalError as error:
            raise self._unavailable(error) from error
        except self._psycopg.errors.InsufficientPrivilege as error:
            raise FailedPrecondition(f"metrics database {self.name} refuses this role: {_one_line(error)} (it needs "
                                     "SELECT, INSERT and UPDATE on the metrics tables, and CREATE the first time)"
                                     ) from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        connection = self._live()
        try:
            with connection.transaction():
                yield
        except self._psycopg.OperationalError as error:  # lost while committing or rolling back
            raise self._unavailable(error) from error

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _migrate(self) -> None:
        with self.transaction():
            self.execute(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            version = None
            if self.execute("SELECT to_regclass('metrics_schema')").fetchone()[0] is not None:
                row = self.execute("SELECT max(version) FROM metrics_schema").fetchone()
                version = row[0]
            if version is not None and version > SCHEMA_VERSION:
                raise FailedPrecondition(
                    f"{self.name}: metrics schema version {version} is newer than this server's ({SCHEMA_VERSION})"
                )
            if version == SCHEMA_VERSION:
                return
            # version None: a new database (every older schema version exists only in SQLite)
            self.execute("CREATE TABLE IF NOT EXISTS metrics_schema (version INTEGER NOT NULL)")
            for statement in self.dialect.schema():
                self.execute(statement)
            self.execute("DELETE FROM metrics_schema")
            self.execute("INSERT INTO metrics_schema(version) VALUES (?)", (SCHEMA_VERSION,))
