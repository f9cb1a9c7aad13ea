"""Serving the admin REST app with uvicorn inside the caller's running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

#: How long ``stop_rest`` lets in-flight requests finish before cancelling them.
GRACEFUL_SHUTDOWN_MS = 5_000


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the process embedding it (``tidegate
    serve`` owns SIGINT/SIGTERM and stops every service in order)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_rest(
    app: FastAPI,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    graceful_shutdown_ms: int = GRACEFUL_SHUTDOWN_MS,
    tls: tuple[str, str, str | None] | None = None,
) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Start serving ``app`` on ``host:port`` in the running loop; return once it accepts.

    The listening socket is bound here, so a port in use raises ``OSError`` to the caller
    (uvicorn would ``sys.exit`` instead). Stop with ``await stop_rest(server, task)``.
    ``port`` 0 picks a free port: read it from ``bound_port(server)``."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=max(1, graceful_shutdown_ms // 1000),
        # HTTPS with the Kafka listeners' PEM key material (certificate chain, key, password).
        ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None,
        ssl_keyfile_password=tls[2] if tls else None,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"rest-{host}:{port}")
    while not server.started:
        if task.done():
            sock.close()
            await task  # raises what stopped it
            raise RuntimeError("the REST server stopped before it started")
        await asyncio.sleep(0.01)
    return server, task


def bound_port(server: uvicorn.Server) -> int:
    """The port ``server`` listens on (useful after ``serve_rest(..., port=0)``)."""
    sockets = server.servers[0].sockets
    return int(sockets[0].getsockname()[1])


async def stop_rest(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    """Stop accepting, let in-flight requests finish (bounded), and wait for the task."""
    server.should_exit = True
    await task
