"""uvicorn's httptools protocol with a deadline for the request head.

uvicorn times out idle keep-alive connections, but not a client that connects and then sends
its request line and headers slowly (or never). This subclass gives every request head
`header_timeout` seconds from the connection or from its first byte, then answers
408 and closes. A slow body is the endpoint's business (`endpoint.read_body`).

Nor does httptools bound the head's size: it buffers a header line until it ends. A head over
`MAX_HEAD_BYTES` gets 431 and the connection closes, so an endless header cannot grow the process.

httptools (llhttp, in C) rather than h11 (pure Python): on a 2 KB review it parses the request
and frames the response for about a third of the CPU, which is most of a do-nothing request.

All of this starts only once the TLS handshake is done. Before that, the connection is the loop's:
`tls_event_loop` gives its TLS servers a handshake deadline (uvloop's default is 60 s, and uvicorn
passes none), and the same deadline for the TLS close after uvicorn closes (30 s by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

EVENT_LOOP = "uvloop"  # libuv's loop: cheaper callbacks and socket I/O than asyncio's own
TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
TIMEOUT_BODY = (b'{"apiVersion":"v1","kind":"Status","status":"Failure","code":408,"reason":"Timeout",'
                b'"message":"the request line and headers were not received in time"}')
MAX_HEAD_BYTES = 64 * 1024  # the API server's heads are well under 1 KiB
TOO_LARGE_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
TOO_LARGE_BODY = (b'{"apiVersion":"v1","kind":"Status","status":"Failure","code":431,'
                  b'"reason":"RequestHeaderFieldsTooLarge","message":"the request line and headers are over '
                  + str(MAX_HEAD_BYTES).encode() + b' bytes"}')


class HeadDeadlineProtocol(HttpToolsProtocol):
    header_timeout = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._in_head = False
        self._head_bytes = 0
        self._arm()

    def data_received(self, data: bytes) -> None:
        continued = self._in_head
        super().data_received(data)
        if not (continued and self._in_head):
            return
        # A chunk that neither starts nor ends a head is all head. The chunk a head starts in is not
        # counted (it may carry a pipelined request before it), so the bound is this plus one read.
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._disarm()
            self.transport.write(TOO_LARGE_RESPONSE % (len(TOO_LARGE_BODY), TOO_LARGE_BODY))
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._arm()  # a keep-alive connection's next request: its head has the same deadline

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()  # the head is in; the body has the endpoint's own deadline
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _expired(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete and not self._in_head:
            return  # a request in progress, between its head and its answer
        self.transport.write(TIMEOUT_RESPONSE % (len(TIMEOUT_BODY), TIMEOUT_BODY))
        self.transport.close()


def protocol_with_timeout(header_timeout: float) -> type[HeadDeadlineProtocol]:
    attributes: dict[str, Any] = {"header_timeout": header_timeout}
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), attributes)


def tls_event_loop(handshake_timeout: float) -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of uvloop loops whose TLS servers abort a handshake, or a close, not done in time."""

    class DeadlineLoop(uvloop.Loop):
        async def create_server(self, *args: Any, **kwargs: Any) -> asyncio.Server:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", handshake_timeout)
                kwargs.setdefault("ssl_shutdown_timeout", handshake_timeout)
            return cast(asyncio.Server, await super().create_server(*args, **kwargs))

    return DeadlineLoop
