"""A real PostgreSQL server for tests: Debian's binaries, a private data directory, a
private unix socket and a random TCP port, as the SSH and Slurm test hosts are built.

    with PgServer() as pg:
        url = pg.url(pg.create_database())  # postgresql://postgres@/db?host=...&port=...

Runs as the `postgres` user when the tests run as root (initdb refuses root), in a
directory of its own under /tmp (pytest's tmp_path is root's only). With `tls=(cert, key)`
it serves TLS and takes TCP logins with a password (scram-sha-256) from `listen`
addresses: a controller in another network namespace reaches it as a fleet's would.
Stopped with `pg_ctl -m immediate` and removed, also after a failed test.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN = Path(os.environ.get("BURNIN_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing_requirements() -> str:
    """Why a PostgreSQL server cannot be started here, or '' when it can."""
    missing = [t for t in ("initdb", "pg_ctl", "psql") if not (BIN / t).exists()]
    if missing:
        return f"missing {', '.join(missing)} in {BIN} (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user to run the server as (apt-get install postgresql)"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    __test__ = False

    def __init__(self, listen: str = "127.0.0.1", tls: tuple[Path, Path] | None = None,
                 fsync: bool = False):
        self.listen, self.tls, self.fsync = listen, tls, fsync
        self.port = free_port()
        self.dir: Path | None = None
        self.started = False

    def __enter__(self) -> PgServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def socket_dir(self) -> Path:
        return self.dir / "socket"

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def _run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        done = subprocess.run(self._as_owner(argv), capture_output=True, text=True,
                              timeout=120, **kw)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n"
                               f"{done.stdout}{done.stderr}")
        return done

    def start(self) -> None:
        problem = missing_requirements()
        if problem:
            raise RuntimeError(problem)
        self.dir = Path(tempfile.mkdtemp(prefix="burnin-pg-"))
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for p in (self.dir, self.socket_dir):
                os.chown(p, owner.pw_uid, owner.pw_gid)
        data = self.dir / "data"
        self._run([str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                   "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"])
        conf = [f"port = {self.port}", f"unix_socket_directories = '{self.socket_dir}'",
                f"listen_addresses = '{self.listen}'", "max_connections = 200",
                f"fsync = {'on' if self.fsync else 'off'}"]
        if self.tls:
            cert, key = self.tls
            for src, name in ((cert, "server.crt"), (key, "server.key")):
                shutil.copy(src, data / name)
                os.chmod(data / name, 0o600)
                if os.geteuid() == 0:
                    os.chown(data / name, owner.pw_uid, owner.pw_gid)
            conf += ["ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'"]
            # TCP only with TLS and a password: what a fleet's ledger would demand
            (data / "pg_hba.conf").write_text(
                "local all all trust\n"
                "hostnossl all all 0.0.0.0/0 reject\n"
                "hostssl all all 0.0.0.0/0 scram-sha-256\n")
        with open(data / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n".join(conf) + "\n")
        self._run([str(BIN / "pg_ctl"), "-D", str(data), "-l", str(self.dir / "log"),
                   "-w", "-t", "60", "start"])
        self.started = True

    def stop(self) -> None:
        if self.dir is None:
            return
        if self.started:
            subprocess.run(self._as_owner([str(BIN / "pg_ctl"), "-D", str(self.dir / "data"),
                                           "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60)
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` as the superuser over the unix socket; its output, unaligned."""
        return self._run([str(BIN / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                          "-h", str(self.socket_dir), "-p", str(self.port), "-U", "postgres",
                          "-d", database, "-c", sql]).stdout

    def create_database(self, owner: str = "postgres") -> str:
        """A new, empty database with a random name."""
        name = f"ledger_{random.randrange(16**8):08x}"
        self.psql(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        return name

    def create_role(self, name: str, password: str) -> None:
        self.psql(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")

    def url(self, database: str, user: str = "postgres") -> str:
        """A ledger URL over the private unix socket (no password: trust, locally)."""
        return f"postgresql://{user}@/{database}?host={self.socket_dir}&port={self.port}"

    def log(self) -> str:
        try:
            return (self.dir / "log").read_text(errors="replace")
        except (OSError, TypeError):
            return ""
