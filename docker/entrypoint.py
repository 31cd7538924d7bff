"""Container entrypoint: on the first start, give the superuser `streamdb` a password; then run the server.

The image listens on 0.0.0.0 with SCRAM authentication (the server refuses `trust` on a non-loopback
address), and the bootstrap superuser `streamdb` has no password, so nobody could log in. On a first
start (no catalog in the data directory yet) with STREAMDB_PASSWORD or STREAMDB_PASSWORD_FILE set, this
runs the server once on 127.0.0.1 with `trust`, Spark and HTTP off, sets the password with
ALTER USER, stops it, and then runs the real server with the arguments it was given. This is the
procedure of docs/security.md ("Bootstrapping a server that others will reach"), automated.

Later starts skip the bootstrap (and ignore the variables): change passwords with ALTER USER.
The two variables are removed from the environment before the server starts: STREAMDB_* names are
otherwise taken as settings, and an unknown setting is refused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from streamdb.config import Settings

PASSWORD_VARIABLES = ("STREAMDB_PASSWORD", "STREAMDB_PASSWORD_FILE")
SERVER = [sys.executable, "-m", "streamdb.cli"]
START_TIMEOUT_SECONDS = 120


def _fail(message: str) -> NoReturn:
    print(f"streamdb entrypoint: {message}", file=sys.stderr)
    sys.exit(2)


def _take_password(environ: dict[str, str]) -> str | None:
    """STREAMDB_PASSWORD, or the first line of the file STREAMDB_PASSWORD_FILE names (Docker secrets)."""
    password = environ.pop("STREAMDB_PASSWORD", None)
    path = environ.pop("STREAMDB_PASSWORD_FILE", None)
    if password is not None and path is not None:
        _fail("set STREAMDB_PASSWORD or STREAMDB_PASSWORD_FILE, not both")
    if path is not None:
        try:
            password = Path(path).read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError) as e:
            _fail(f"cannot read a password from STREAMDB_PASSWORD_FILE={path}: {e}")
    if password == "" or (password is not None and "\0" in password):
        _fail("the password is empty or contains a NUL character")
    return password


def _settings(serve_args: list[str], environ: dict[str, str]) -> Settings:
    """The settings `streamdb serve serve_args` would run with (only data_dir and auth_method matter here)."""
    from streamdb.config import load_settings
    from streamdb.errors import StreamDBError

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    parser.add_argument("--data-dir", dest="data_dir")
    parser.add_argument("--auth-method", dest="auth_method")
    known, _ = parser.parse_known_args(serve_args)
    try:
        return load_settings({"data_dir": known.data_dir, "auth_method": known.auth_method},
                             config_file=known.config, environ=environ)
    except StreamDBError as e:
        _fail(str(e))


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quote(text: str) -> str:
    """A standard SQL string literal. Not psycopg's Literal: it writes E'...' when there is a backslash,
    which ALTER USER ... PASSWORD does not accept; in a standard literal a backslash is just a character."""
    return "'" + text.replace("'", "''") + "'"


def bootstrap(serve_args: list[str], environ: dict[str, str], password: str) -> None:
    """Run the server once on loopback with trust and set the superuser's password."""
    import psycopg
    from psycopg import sql

    port = _free_loopback_port()
    # Flags win over the environment and the file, so these override whatever the image sets.
    cmd = [*SERVER, "serve", *serve_args, "--host", "127.0.0.1", "--port", str(port),
           "--auth-method", "trust", "--no-console", "--no-metrics"]
    proc = subprocess.Popen(cmd, env={**environ, "STREAMDB_SPARK_ENABLED": "false"})
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the bootstrap server exited with status {proc.returncode}")
            try:
                with psycopg.connect(host="127.0.0.1", port=port, user="streamdb", dbname="streamdb",
                                     connect_timeout=2, autocommit=True) as conn:
                    conn.execute(sql.SQL("ALTER USER streamdb PASSWORD {}").format(sql.SQL(_quote(password))))
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the bootstrap server did not accept connections") from None
                time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print("streamdb entrypoint: the superuser streamdb has its password; starting the server",
          file=sys.stderr)


def main(argv: list[str]) -> None:
    args = argv or ["serve"]
    if args[0].startswith("-"):
        args = ["serve", *args]  # `docker run streamdb --log-level debug` means serve with that flag
    environ = dict(os.environ)
    password = _take_password(environ)
    if args[0] == "serve":
        serve_args = args[1:]
        settings = _settings(serve_args, environ)
        catalog = Path(settings.data_dir) / "log"
        if catalog.exists():
            if password is not None:
                print("streamdb entrypoint: the data directory is not new, so the password variable is "
                      "ignored (change passwords with ALTER USER)", file=sys.stderr)
        elif password is not None:
            try:
                bootstrap(serve_args, environ, password)
            except Exception as e:  # noqa: BLE001 - start from scratch next time, never half-bootstrapped
                shutil.rmtree(catalog, ignore_errors=True)
                _fail(f"first-start bootstrap failed: {e}")
        elif settings.auth_method != "trust":
            _fail("a new data directory and password authentication: set STREAMDB_PASSWORD or "
                  "STREAMDB_PASSWORD_FILE (a file holding the password) so that the superuser streamdb "
                  "can log in")
        os.execve(sys.executable, [*SERVER, *args], environ)
    # Anything else (`streamdb --help`, a shell) runs as given.
    os.execvpe(args[0], args, environ)


if __name__ == "__main__":
    main(sys.argv[1:])
