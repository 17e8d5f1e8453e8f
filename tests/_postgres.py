"""A throwaway PostgreSQL server for the tests and benchmarks: `initdb` in a temporary
folder, `pg_ctl start` on 127.0.0.1 at a free port, password authentication over TCP,
`pg_ctl stop` and the folder removed afterwards.

The server binaries are found on PATH, in $SWEEP_PG_BINDIR, or where Debian's
`postgresql` package puts them (/usr/lib/postgresql/VERSION/bin; `.ci/run` installs it).
As root (CI) the server runs as the unprivileged `postgres` user that package creates
(PostgreSQL refuses to run as root). Without the binaries `PostgresServer.find()` says
why, and the tests skip with that reason, unless SWEEP_REQUIRE_POSTGRES=1 (set by
`.ci/run`), where they fail.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "sweep"


def _bindir() -> Path | None:
    env = os.environ.get("SWEEP_PG_BINDIR")
    candidates = [Path(env)] if env else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                           key=lambda p: int(p.split("/")[-2]), reverse=True)]
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """`with PostgresServer() as pg:` a running server; `pg.url(db)` a password-less URL
    (the password is `pg.password`, to be given as PGPASSWORD), `pg.create_database(name)`."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bindir = _bindir()
        self.settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                         "max_connections": "200"}
        self.settings.update(settings or {})
        self.password = "pw-" + secrets.token_hex(12)
        self.port = 0
        self.root: Path | None = None
        self._as: dict[str, int] = {}

    @staticmethod
    def missing() -> str | None:
        """Why no server can be started here (None: it can)."""
        if _bindir() is None:
            return "PostgreSQL server binaries not found (apt-get install postgresql, or set SWEEP_PG_BINDIR)"
        if os.geteuid() == 0:
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root and there is no unprivileged 'postgres' user to run the server as"
        return None

    @classmethod
    def require(cls) -> None:
        """Skip the test when no server can be started here, or fail it where CI demands one
        (`SWEEP_REQUIRE_POSTGRES=1`, set by `.ci/run`)."""
        import pytest

        why = cls.missing()
        if why is not None:
            if os.environ.get("SWEEP_REQUIRE_POSTGRES") == "1":
                pytest.fail(why)
            pytest.skip(why)

    def _run(self, *args: str, **kw: object) -> subprocess.CompletedProcess:
        assert self.bindir is not None
        return subprocess.run([str(self.bindir / args[0]), *args[1:]], check=True, capture_output=True, text=True,
                              timeout=120, **self._as, **kw)  # type: ignore[arg-type]

    def __enter__(self) -> PostgresServer:
        why = self.missing()
        if why is not None:
            raise RuntimeError(why)
        self.root = Path(tempfile.mkdtemp(prefix="sweep-pg-"))
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            self._as = {"user": pw.pw_uid, "group": pw.pw_gid}
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-U", USER, f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                  "--auth-local=trust", "-E", "UTF8", "--locale=C")
        pwfile.unlink()
        self.port = _free_port()
        self.start()
        return self

    def start(self) -> None:
        """Start the server (again, after `stop`: the same data, the same port)."""
        assert self.root is not None
        opts = " ".join([f"-p {self.port}", "-c listen_addresses=127.0.0.1", f"-c unix_socket_directories={self.root}"]
                        + [f"-c {k}={v}" for k, v in self.settings.items()])
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-o", opts, "-w", "-t", "60",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data: `fast` ends every session and shuts down
        cleanly (as a service stop does), `immediate` as a crash would (recent commits may
        be lost with synchronous_commit off)."""
        assert self.root is not None
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "-t", "60", "stop")

    def __exit__(self, *exc: object) -> None:
        if self.root is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def url(self, db: str = "postgres") -> str:
        """The storage URL a grid file carries: no password (it is in PGPASSWORD)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{db}"

    def env(self) -> dict[str, str]:
        """The environment a worker needs: the password, never in a URL."""
        return {**os.environ, "PGPASSWORD": self.password}

    def connect(self, db: str = "postgres"):  # -> psycopg.Connection (psycopg is optional)
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password, dbname=db,
                               autocommit=True)

    def create_database(self, name: str) -> str:
        """A fresh database (dropped first if it exists); returns its URL."""
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
