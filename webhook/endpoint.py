"""The admission hot path: a plain ASGI app per endpoint, mounted as a route in the FastAPI app.

It reads the body with a size bound and a deadline, hands the bytes to `review`, and writes
JSON. No FastAPI validation layer stands in between. Every request that gets no verdict gets a
4xx with a metav1.Status body saying why:

    405 not POST       408 body not received in time      413 body over the limit
    415 not JSON content type    400 not an AdmissionReview v1    503 no policy set loaded yet
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

import orjson

from mlgate.model.exceptions import NO_EXCEPTIONS

from .jsonlog import log_decision, log_rejected
from .review import Admission, Endpoint, ReviewError, admit, parse_review
from .service import Service

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
log = logging.getLogger("mlgate.webhook")
OFF_LOOP_BYTES = 256 * 1024  # reviews this large are parsed and judged on a worker thread


class ClientGone(Exception):
    """The client disconnected before its request was read; there is nobody to answer."""


class AdmissionEndpoint:
    def __init__(self, service: Service, endpoint: Endpoint):
        self.service = service
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        deadline = time.monotonic() + self.service.settings.review_deadline
        try:
            admission = await self._admit(scope, receive, deadline)
        except ReviewError as error:
            await _send_json(send, error.status, error.body(), close=error.status in (408, 413))
            self._rejected(error.status, error.message, start)
            return
        except ClientGone:
            return
        except Exception:  # a bug in this transport: logged with its trace, answered without it
            log.exception("%s: unexpected error", self.endpoint)
            failure = ReviewError(500, "InternalError", "the webhook failed on this request; its log has the details")
            await _send_json(send, 500, failure.body(), close=True)
            self._rejected(500, failure.message, start)
            return
        await _send_json(send, 200, admission.review())
        seconds = time.perf_counter() - start
        policies = self.service.policies.current  # the kind label: the request's kind if this set knows it
        self.service.metrics.observe(self.endpoint, admission.request.kind, admission.verdict, seconds,
                                     admission.results, kinds=policies.kinds if policies is not None else None)
        log_decision(admission, self.endpoint, seconds)
        if self.service.events is not None and admission.verdict == "denied":
            self.service.events.denied(admission)

    async def _admit(self, scope: Scope, receive: Receive, deadline: float) -> Admission:
        if scope.get("method") != "POST":
            await _drain(receive, self.service.settings.max_body_bytes)
            raise ReviewError(405, "MethodNotAllowed", f"{scope.get('method')} is not allowed; send POST")
        # A review of a few MiB takes a second or so: on a thread, the loop keeps answering the probes and the
        # small reviews in between (it gets the GIL back every switch interval). One at a time (`large_reviews`):
        # each peaks at over a hundred MiB. The turn is taken before the body is read where its length is
        # declared (the API server always declares it), so waiting reviews hold no body in this process.
        declared = _header(scope, b"content-length")
        large = declared is not None and declared.isdigit() and int(declared) >= OFF_LOOP_BYTES
        if large:
            await self._turn(deadline)
        try:
            body = await read_body(scope, receive, self.service.settings.max_body_bytes,
                                   self.service.settings.read_timeout)
            content_type = _header(scope, b"content-type")
            if len(body) < OFF_LOOP_BYTES:
                return self._judge(body, content_type, deadline)
            if not large:  # a large body that did not say so
                await self._turn(deadline)
                large = True
            return await asyncio.to_thread(_without_gc_pauses, self._judge, body, content_type, deadline)
        finally:
            if large:
                self.service.large_reviews.release()

    async def _turn(self, deadline: float) -> None:
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                await self.service.large_reviews.acquire()
        except TimeoutError:
            raise ReviewError(429, "TooManyRequests", "large reviews are judged one at a time and this one waited "
                              "past its deadline; the API server applies the webhook's failurePolicy") from None

    def _judge(self, body: bytes, content_type: str | None, deadline: float) -> Admission:
        request = parse_review(body, content_type)
        policies = self.service.policies.current
        if policies is None:
            raise ReviewError(503, "ServiceUnavailable", "no policy set is loaded yet: "
                              + ("; ".join(self.service.policies.errors) or "loading"))
        store = self.service.exceptions  # judged at the request's arrival: the engine reads no clock
        exceptions = store.at(datetime.now(UTC)) if store is not None else NO_EXCEPTIONS
        return admit(request, policies, self.service.facts, self.endpoint, deadline, exceptions=exceptions)

    def _rejected(self, status: int, message: str, start: float) -> None:
        seconds = time.perf_counter() - start
        self.service.metrics.observe(self.endpoint, "unknown", str(status), seconds)
        log_rejected(self.endpoint, status, message, seconds)


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float) -> bytes:
    """The request body, at most `limit` bytes, within `timeout` seconds."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        await _drain(receive, limit)
        raise _too_large(limit, f"Content-Length {declared}")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    await _drain(receive, limit)
                    raise _too_large(limit, "the body")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise ReviewError(408, "Timeout", f"the request body was not received within {timeout:g}s") from None


async def _drain(receive: Receive, limit: int, timeout: float = 1.0) -> None:
    """Read and drop a little of what the client is still sending, so that it can read our answer.

    At most four times the body limit and one second; the connection is closed after the answer.
    """
    budget = 4 * limit
    try:
        async with asyncio.timeout(timeout):
            while budget > 0:
                message = await receive()
                budget -= len(message.get("body", b""))
                if message["type"] == "http.disconnect" or not message.get("more_body", False):
                    return
    except TimeoutError:
        return


def _too_large(limit: int, what: str) -> ReviewError:
    return ReviewError(413, "RequestEntityTooLarge", f"{what} is over the limit of {limit} bytes; an AdmissionReview "
                       "holds at most two objects of about 3 MiB each")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _send_json(send: Send, status: int, payload: dict[str, Any], close: bool = False) -> None:
    body = orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _loop_time(monotonic_deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock (uvloop's is its own)."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())


def _without_gc_pauses(judge: Callable[[bytes, str | None, float], Admission], body: bytes,
                       content_type: str | None, deadline: float) -> Admission:
    """Judge with the cyclic garbage collector paused. A large review makes millions of objects; each full
    collection would walk them all holding the GIL, stalling the loop (probes waited a second). The review's
    objects hold no cycles, so reference counting frees them as they go; one review at a time runs here."""
    gc.disable()
    try:
        return judge(body, content_type, deadline)
    finally:
        gc.enable()
