"""Checks ``tidegate serve`` makes before it starts anything, so that a mistake at start
is one line naming what is wrong (exit status 2), not a traceback from deep inside.

- The data directory is locked for the process's life (``flock`` on ``<dir>/.lock``,
  which also holds the owner's pid): a second server on it is refused at once, before
  RocksDB would fail on its own lock.
- Every listener address (Kafka, REST, gRPC) is bound once and released: one in use is
  named. Another process may still take it in between (binding then fails as before).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import IO


class StartupError(Exception):
    """What stops the server from starting, in one line."""


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Take the data directory's lock; keep the returned file open while serving."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = open(data_dir / ".lock", "a+")  # noqa: SIM115  (held for the process's life)
    except OSError as exc:
        raise StartupError(f"data dir {data_dir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        lock.seek(0)
        owner = lock.read().strip()
        lock.close()
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            who = f" (pid {owner})" if owner.isdigit() else ""
            raise StartupError(
                f"data dir {data_dir} is in use by another tidegate process{who}"
            ) from None
        raise StartupError(f"data dir {data_dir}: cannot lock it: {exc.strerror}") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def check_address_free(what: str, host: str, port: int) -> None:
    """Raise ``StartupError`` if ``host:port`` cannot be listened on now."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"{what} address {host}:{port}: {exc.strerror}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise StartupError(bind_message(what, host, port, exc)) from None


def bind_message(what: str, host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"{what} address {host}:{port} is already in use"
    return f"{what} address {host}:{port}: {exc.strerror or exc}"
