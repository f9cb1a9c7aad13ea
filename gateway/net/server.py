"""The Kafka listener: asyncio connections, framing, dispatch, ordered answers.

Per connection:
- frames are received by ``gateway.net.wire.KafkaWire`` (straight into their buffers); a size
  over ``socket.request.max.bytes`` (before a SASL login, ``sasl.server.max.receive.size``)
  closes the connection before the body is read; a large frame is charged to the
  node-wide ``queued.max.request.bytes`` before its body arrives;
- an unparseable header, an unknown API key, an undecodable body, or an unsupported
  version (except ApiVersions, answered in v0 with UNSUPPORTED_VERSION) stops reading:
  requests already accepted are answered, then the connection closes;
- up to ``max.in.flight.requests.per.connection`` requests are read ahead and run
  concurrently, each starting once the previous one released (see
  ``gateway.handlers``); answers are written strictly in request order;
- a request without an answer (acks=0 Produce) takes its turn and writes nothing;
- a small answer whose turn has come (the writer waits for just this request) is
  written by the request's own task as it finishes, not one event-loop hop later by the
  writer;
- each request's time from its frame read to its answer handed to the socket goes to
  the node's metrics (``gateway.admin.metrics``).
Shutdown stops reading on every connection, answers what was accepted, then closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import ssl
import time
from collections.abc import Callable
from typing import Any

from tidegate.gateway.admin.metrics import Metrics
from tidegate.gateway.handlers import EncodedBody, HandlerContext, RequestContext, sasl_authenticate
from tidegate.gateway.handlers import api_versions as api_versions_handler
from tidegate.gateway.net.framepool import FramePool
from tidegate.gateway.net.limits import (
    ConnectionLimits,
    max_connections_for_fd_limit,
    parse_ip_overrides,
)
from tidegate.gateway.net.request_budget import RequestBudget
from tidegate.gateway.net.wire import Frame, FrameTooLargeError, KafkaWire
from tidegate.gateway.security.api_acls import guarded, guarded_metadata
from tidegate.gateway.security.listeners import Listener
from tidegate.gateway.security.session import RawToken, Session
from tidegate.gateway.security.tls import certificate_principal, server_context
from tidegate.protocol.apis import API_VERSIONS_KEY, ApiSpec
from tidegate.protocol.errors import ErrorCode, KafkaProtocolError
from tidegate.protocol.framing import (
    encode_response_header,
    parse_request_header,
    peek_request_header,
    size_prefix,
)

log = logging.getLogger(__name__)

_Item = tuple["asyncio.Future[Any]", RequestContext, ApiSpec]

SASL_AUTHENTICATE_KEY = 36
#: The api key of a bare SASL token's request context: its answer is written bare.
_RAW_TOKEN_KEY = -1


class Connection:
    def __init__(
        self, server: KafkaServer, wire: KafkaWire, listener: Listener,
        advertised: tuple[str, int],
    ) -> None:
        self._server = server
        self._ctx = server.ctx
        self._wire = wire
        peer = wire.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.session = Session(listener, advertised, host)
        if listener.tls:
            self.session.principal = certificate_principal(wire.get_extra_info("peercert"))
        if listener.sasl:
            self.session.gated, self.session.authenticated = True, False
            wire.set_frame_bytes_max(self._frame_bytes_max)
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(self._ctx.config.max_in_flight_requests_per_connection)
        self._read_task: asyncio.Task[None] | None = None
        #: The request whose task the writer is waiting for: every earlier answer is out.
        self._turn: RequestContext | None = None
        #: When a request was last read or answered, and requests read and not answered:
        #: ``connections.max.idle.ms`` counts from the first while the second is 0.
        self.last_active = time.monotonic()
        self.pending = 0

    def _frame_bytes_max(self) -> int:
        """Before the login, Kafka's ``sasl.server.max.receive.size``: an unauthenticated
        client cannot make the node hold large frames."""
        config = self._ctx.config
        if self.session.authenticated:
            return config.socket_request_max_bytes
        return min(config.socket_request_max_bytes, config.sasl_server_max_receive_size)

    async def run(self) -> None:
        self._read_task = asyncio.create_task(self._read_loop())
        try:
            await self._write_loop()
        finally:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
            self._wire.close()
            with contextlib.suppress(Exception):
                await self._wire.wait_closed()

    def stop_reading(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()

    async def _read_loop(self) -> None:
        released = asyncio.Event()
        released.set()
        try:
            while True:
                await self._slots.acquire()
                try:
                    frame, charged = await self._wire.read_charged()
                except FrameTooLargeError as exc:
                    log.warning(
                        "%s: frame of %d bytes over %s", self.peer, exc.size,
                        "socket.request.max.bytes" if self.session.authenticated
                        else "sasl.server.max.receive.size before authentication",
                    )
                    return
                size = len(frame)
                if not charged:  # a large frame was charged before it arrived
                    await self._server.request_bytes.acquire(size)
                try:
                    item = self._accept(frame, released)
                except BaseException:
                    self._server.request_bytes.release(size)
                    raise
                # Not kept while the next frame is awaited: a request that copied what
                # it needs (JoinGroup's metadata) frees its frame now.
                del frame
                # Held until the task is over: answered, failed or cancelled.
                item[0].add_done_callback(_releasing(self._server.request_bytes, size))
                released = item[1].released
                self.pending += 1
                self.last_active = time.monotonic()
                self._queue.put_nowait(item)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except KafkaProtocolError as exc:
            log.info("%s: closing: %s", self.peer, exc)
        except asyncio.CancelledError:
            pass
        finally:
            self._wire.release_unread()
            self._queue.put_nowait(None)

    def _accept(self, frame: Frame, previous: asyncio.Event) -> _Item:
        if self.session.raw_tokens:
            return self._raw_token(frame, previous)
        key, version, correlation_id = peek_request_header(frame)
        api = self._ctx.registry.get(key)
        if api is None:
            raise KafkaProtocolError(f"unknown API key {key}")
        spec = api.spec
        header = parse_request_header(frame, spec.request_header_flexible(version))
        session = self.session
        if session.gated and not session.admits(key):
            raise KafkaProtocolError(
                f"{spec.name} before SASL authentication (or after the session expired)"
            )
        req = RequestContext(
            key, version, correlation_id, header.client_id, peer=self.peer,
            received=time.monotonic(), session=session,
        )
        if not spec.supports(version):
            if key != API_VERSIONS_KEY:
                raise KafkaProtocolError(f"{spec.name} v{version} is not supported")
            # Kafka's answer: ApiVersions v0 with UNSUPPORTED_VERSION and our versions.
            req.api_version = 0
            answer = api_versions_handler.response(self._ctx, ErrorCode.UNSUPPORTED_VERSION)
            return self._start(_answer(answer), req, spec, previous)
        request = spec.decode_request(memoryview(frame), header.body_offset, version)
        security = self._ctx.security
        if security is not None and security.authorizer is not None:
            return self._start(self._guarded(api, req, request), req, spec, previous)
        return self._start(api.handle(self._ctx, req, request), req, spec, previous)

    def _raw_token(self, frame: Frame, previous: asyncio.Event) -> _Item:
        """A bare SASL token after SaslHandshake v0 (answered bare, see ``_framed``)."""
        api = self._ctx.registry.get(SASL_AUTHENTICATE_KEY)
        if api is None:
            raise KafkaProtocolError("SASL token without SaslAuthenticate")
        req = RequestContext(
            _RAW_TOKEN_KEY, 0, 0, None, peer=self.peer, received=time.monotonic(),
            session=self.session,
        )
        coro = sasl_authenticate.raw_token(self._ctx, req, bytes(frame))
        return self._start(coro, req, api.spec, previous)

    def _guarded(self, api: Any, req: RequestContext, request: Any) -> Any:
        """The handler's coroutine behind the authorizer (``gateway.security.api_acls``)."""
        security = self._ctx.security
        assert security is not None and security.authorizer is not None
        decider = security.authorizer
        ctx = self._ctx

        def handle() -> Any:
            return api.handle(ctx, req, request)

        if req.api_key == 3:
            return guarded_metadata(decider, self.session, request, handle)
        return guarded(
            decider, self.session, api.spec, request, req.api_version, handle,
            ctx.topics.name_of,
        )

    def _start(
        self, coro: Any, req: RequestContext, spec: ApiSpec, previous: asyncio.Event
    ) -> _Item:
        async def run() -> Any:
            await previous.wait()
            try:
                result = await coro
            finally:
                req.release()
            if result is not None and self._turn is req and self._wire.writable_now:
                result = self._answer_now(result, req, spec)
            if result is None:  # answered just now, or nothing to answer (acks=0)
                self._server.metrics.observe_request(spec.name, time.monotonic() - req.received)
            return result

        task = asyncio.ensure_future(run())
        # A task cancelled before it ran (its connection closed with it queued) never
        # awaited ``coro``: close it, or Python warns that it was never awaited.
        task.add_done_callback(lambda _: coro.close())
        return task, req, spec

    def _answer_now(self, result: Any, req: RequestContext, spec: ApiSpec) -> Any:
        """Write a small answer at once and return None (nothing left for the writer);
        else return what the writer needs: the encoded body, or ``result`` itself if it
        does not encode (the writer then reports that and closes the connection)."""
        try:
            body = _encode_body(result, req, spec)
        except Exception:
            return result
        framed = _framed(body, req, spec)
        if sum(len(b) for b in framed) >= _LARGE_BUFFER_BYTES:
            return EncodedBody(body)
        self._wire.write(b"".join(framed))
        return None

    async def _write_loop(self) -> None:
        while (item := await self._queue.get()) is not None:
            task, req, spec = item
            self._turn = req
            try:
                result = await task
            except Exception as exc:
                # A bug of ours: one line (the fuzzer looks for "failed ("), the
                # traceback at debug level.
                log.error(
                    "%s: %s v%d failed (%s: %s); closing",
                    self.peer, spec.name, req.api_version, type(exc).__name__, exc,
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
                self._abort()
                return
            finally:
                self._turn = None
                self._slots.release()
                self.pending -= 1
                self.last_active = time.monotonic()
            if self.session.closing:  # a failed login: its answer, then nothing more
                await self._close_failed_login(result, req, spec)
                return
            if result is None:
                continue
            try:
                body = _encode_body(result, req, spec)
            except Exception:
                # A response the codec refuses is a bug of ours: close this connection
                # only, as for a failed handler, instead of escaping the connection task.
                log.exception(
                    "%s: %s v%d answer not encodable; closing",
                    self.peer,
                    spec.name,
                    req.api_version,
                )
                self._abort()
                return
            try:
                await _write_buffers(self._wire, _framed(body, req, spec))
                self._server.metrics.observe_request(spec.name, time.monotonic() - req.received)
                await self._wire.drain()
            except ConnectionError:
                self._abort()
                return

    async def _close_failed_login(self, result: Any, req: RequestContext, spec: ApiSpec) -> None:
        """Stop reading, wait Kafka's ``connection.failed.authentication.delay.ms``, write
        the refusal and close: the client learns of the failure only after the delay,
        so one connection cannot guess faster (Kafka delays the answer too)."""
        self.stop_reading()
        await asyncio.sleep(self._ctx.config.connection_failed_authentication_delay_ms / 1000)
        with contextlib.suppress(Exception):
            if result is not None:
                await _write_buffers(self._wire, _framed(_encode_body(result, req, spec), req, spec))
            await self._wire.drain()
        self._abort()

    def _abort(self) -> None:
        self.stop_reading()
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                item[0].cancel()


#: Buffers at least this large are handed to the transport on their own (sent straight
#: from the stored slice when the socket takes them); smaller ones are coalesced.
_LARGE_BUFFER_BYTES = 64 * 1024
#: Most bytes handed to the transport before waiting for it to drain.
_WRITE_PIECE_BYTES = 1024 * 1024


async def _write_buffers(writer: KafkaWire, buffers: list[bytes | memoryview]) -> None:
    """Write in order without joining everything first (Python 3.11's ``writelines``
    joins all buffers into one: a copy of every fetched batch), each write of at most
    about ``_WRITE_PIECE_BYTES`` once the transport has drained. What the socket does not
    take at once the transport copies into a buffer that it then consumes from the front,
    moving the rest down after every send: a large Fetch answer handed over at once
    costs a copy per send of everything still queued."""

    async def put(data: bytes | memoryview) -> None:
        await writer.drain()  # at once unless the transport paused writing
        writer.write(data)

    small = bytearray()
    for buf in buffers:
        n = len(buf)
        if n < _LARGE_BUFFER_BYTES:
            small += buf
            if len(small) >= _WRITE_PIECE_BYTES:
                await put(bytes(small))
                small.clear()
            continue
        if small:
            await put(bytes(small))
            small.clear()
        view = memoryview(buf)
        for start in range(0, n, _WRITE_PIECE_BYTES):
            await put(view[start : start + _WRITE_PIECE_BYTES])
    if small:
        await put(bytes(small))


async def _answer(value: Any) -> Any:
    return value


def _encode_body(result: Any, req: RequestContext, spec: ApiSpec) -> list[bytes | memoryview]:
    if isinstance(result, RawToken):
        return [result.token]
    if isinstance(result, EncodedBody):
        return list(result.buffers)
    return [spec.encode_response(result, req.api_version)]


def _framed(
    body: list[bytes | memoryview], req: RequestContext, spec: ApiSpec
) -> list[bytes | memoryview]:
    """The answer's buffers on the wire: size prefix, response header, body (a bare
    SASL token after SaslHandshake v0: no header)."""
    if req.api_key == _RAW_TOKEN_KEY:
        return [size_prefix(sum(len(b) for b in body)), *body]
    header = encode_response_header(
        req.correlation_id, spec.response_header_flexible(req.api_version)
    )
    return [size_prefix(len(header) + sum(len(b) for b in body)), header, *body]


class KafkaServer:
    def __init__(self, ctx: HandlerContext, metrics: Metrics) -> None:
        self.ctx = ctx
        self.metrics = metrics
        self._servers: list[asyncio.Server] = []
        #: Each listener's bound address, by listener name (configuration order).
        self.bound: dict[str, tuple[str, int]] = {}
        self.advertised: dict[str, tuple[str, int]] = {}
        self._connections: dict[Connection, asyncio.Task[None]] = {}
        #: Large request frames' buffers, shared by every connection.
        self.frame_pool = FramePool()
        #: Bytes of request frames read and not yet answered, node-wide.
        self.request_bytes = RequestBudget(ctx.config.queued_max_request_bytes)
        config = ctx.config
        max_connections = config.max_connections
        if max_connections <= 0:
            fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            max_connections = max_connections_for_fd_limit(fd_limit)
        self.limits = ConnectionLimits(
            max_connections,
            config.max_connections_per_ip,
            parse_ip_overrides(config.max_connections_per_ip_overrides),
        )
        self._idle_sweep: asyncio.TimerHandle | None = None

    async def start(self, serving: bool = True) -> tuple[str, int]:
        """Bind every configured listener, listening unless ``serving`` is False (then
        ``start_serving`` does); the first one's bound address."""
        loop = asyncio.get_running_loop()
        config = self.ctx.config
        advertised = config.advertised_by_listener()
        contexts: dict[bool, ssl.SSLContext] = {}
        for listener in config.kafka_listeners():
            tls = None
            if listener.tls:
                tls = contexts.get(listener.sasl)
                if tls is None:
                    tls = contexts[listener.sasl] = server_context(config, sasl=listener.sasl)
            server = await loop.create_server(
                _wire_factory(self, listener, advertised),
                listener.host or None, listener.port, ssl=tls, start_serving=serving,
            )
            self._servers.append(server)
            sock = server.sockets[0].getsockname()
            bound = (str(sock[0]), int(sock[1]))
            self.bound[listener.name] = bound
            advertised.setdefault(listener.name, bound)
        #: Each listener's advertised address (a cluster node announces them all).
        self.advertised = advertised
        self._schedule_idle_sweep()
        return next(iter(self.bound.values()))

    async def start_serving(self) -> None:
        for server in self._servers:
            await server.start_serving()

    def _on_connection(
        self, wire: KafkaWire, listener: Listener, advertised: dict[str, tuple[str, int]]
    ) -> None:
        peer = wire.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self.limits.admit(ip):
            wire.close()
            return
        conn = Connection(self, wire, listener, advertised[listener.name])
        self._connections[conn] = asyncio.get_running_loop().create_task(self._serve(conn, ip))

    async def _serve(self, conn: Connection, ip: str) -> None:
        try:
            await conn.run()
        finally:
            self._connections.pop(conn, None)
            self.limits.release(ip)

    def _schedule_idle_sweep(self) -> None:
        idle_ms = self.ctx.config.connections_max_idle_ms
        if idle_ms > 0:
            interval_s = min(idle_ms / 4000, 10.0)
            loop = asyncio.get_running_loop()
            self._idle_sweep = loop.call_later(interval_s, self._close_idle)

    def _close_idle(self) -> None:
        idle_s = self.ctx.config.connections_max_idle_ms / 1000
        now = time.monotonic()
        for conn in list(self._connections):
            if conn.pending == 0 and now - conn.last_active >= idle_s:
                log.info("%s: closing: idle over connections.max.idle.ms", conn.peer)
                conn.stop_reading()
        self._schedule_idle_sweep()

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, stop reading, answer what was accepted (bounded), close."""
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.stop_reading()
        tasks = list(self._connections.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout_s)
            for task in late:
                task.cancel()
        for server in self._servers:
            await server.wait_closed()


def _wire_factory(
    server: KafkaServer, listener: Listener, advertised: dict[str, tuple[str, int]]
) -> Callable[[], KafkaWire]:
    config = server.ctx.config

    def make() -> KafkaWire:
        return KafkaWire(
            lambda: config.socket_request_max_bytes,
            lambda wire: server._on_connection(wire, listener, advertised),
            pool=server.frame_pool, budget=server.request_bytes,
        )

    return make


def _releasing(budget: RequestBudget, size: int) -> Callable[[object], None]:
    """A done callback giving ``size`` bytes back to ``budget``."""
    return lambda _: budget.release(size)
