"""HTTP clients of the gateway: a lean pooled HTTP/1.1 client for our lanes, httpx for the rest.

Lanes are plain HTTP on loopback and carry every streamed token, so their client is on the
hot path. httpx/httpcore re-scan every pooled connection (with syscalls) each time a
request is queued or a response is released, which under 32 concurrent streams cost more
CPU than the relaying itself; `LaneClient` keeps idle connections per host in a LIFO list
and speaks just what a lane answers (Content-Length or chunked bodies). Upstream URLs
(TLS, proxies, HTTP/2...) and the gateway's side calls (count, slots, health) use the
shared httpx client.
"""

import asyncio
from collections import defaultdict
from urllib.parse import urlsplit

import httpx
from django.conf import settings

_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    """The shared httpx client (created on first use, inside the server's event loop)."""
    global _client
    if _client is None:
        _client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.STRATA_UPSTREAM_TIMEOUT, connect=5.0),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
        )
    return _client


class UpstreamError(Exception):
    """The lane could not be reached, or broke the connection before answering."""


class Headers:
    """The part of httpx.Headers that forward uses: `.raw` pairs and case-insensitive `.get`."""

    def __init__(self, raw: list[tuple[bytes, bytes]]):
        self.raw = raw
        self._map = {k.lower(): v for k, v in raw}

    def get(self, name: str, default: str = "") -> str:
        value = self._map.get(name.lower().encode())
        return value.decode("latin-1") if value is not None else default


class LaneResponse:
    """A response being read from one pooled connection; `aclose()` returns or drops the connection."""

    def __init__(self, pool: "LaneClient", key, reader, writer, status: int, headers: Headers, timeout: float):
        self.pool, self.key, self.reader, self.writer = pool, key, reader, writer
        self.status_code, self.headers, self.timeout = status, headers, timeout
        length = headers.get("content-length")
        self._chunked = "chunked" in headers.get("transfer-encoding").lower()
        self._remaining = int(length) if length and not self._chunked else None
        self._done = status in (204, 304) or self._remaining == 0
        self._keep = headers.get("connection").lower() != "close" and (self._chunked or self._remaining is not None)
        self._closed = False
        # One watchdog per response instead of a timer per read: it fires `timeout` seconds after the
        # last data, or checks again later if data came meanwhile.
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._timed_out = False
        self._watchdog = self._loop.call_at(self._last + timeout, self._watch)

    def _watch(self):
        idle_until = self._last + self.timeout
        if self._loop.time() < idle_until:
            self._watchdog = self._loop.call_at(idle_until, self._watch)
        elif not self._closed:
            self._timed_out, self._keep = True, False
            self.writer.close()  # the pending read ends with an error

    async def _read(self, coro):
        data = await coro
        self._last = self._loop.time()
        return data

    async def aiter_raw(self):
        """The body as it arrives, chunked framing removed. Chunks that arrived together are given
        together (one write to the client instead of several); none is held back to wait for more."""
        reader = self.reader
        try:
            if self._chunked:
                buffer = bytearray()
                while not self._done:
                    data = await self._read(reader.read(1 << 16))
                    if not data:
                        raise self._cut_off()
                    buffer += data
                    payload = self._take_chunks(buffer)
                    if payload:
                        yield payload
                return
            while not self._done:
                if self._remaining is not None:
                    data = await self._read(reader.read(min(self._remaining, 1 << 16)))
                    if not data:
                        raise self._cut_off()
                    self._remaining -= len(data)
                    self._done = self._remaining == 0
                    yield data
                else:
                    data = await self._read(reader.read(1 << 16))
                    if not data:
                        self._done = True
                        break
                    yield data
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            self._keep = False
            if self._timed_out:
                raise UpstreamError(f"the lane sent nothing for {self.timeout:g} s")
            raise UpstreamError(f"the lane broke the response: {exc!r}")

    def _cut_off(self) -> "UpstreamError":
        self._keep = False
        if self._timed_out:
            return UpstreamError(f"the lane sent nothing for {self.timeout:g} s")
        return UpstreamError("the lane closed the connection mid-body")

    def _take_chunks(self, buffer: bytearray) -> bytes:
        """Remove every complete chunk from `buffer`; their payloads joined (b"" if none is complete)."""
        out, pos = [], 0
        while True:
            end = buffer.find(b"\r\n", pos)
            if end < 0:
                break
            size = int(bytes(buffer[pos:end]).split(b";", 1)[0], 16)
            if size == 0:
                trailer_end = buffer.find(b"\r\n\r\n", end) if buffer[end + 2:end + 4] != b"\r\n" else end
                if trailer_end < 0:
                    break
                pos = trailer_end + 4
                self._done = True
                if pos != len(buffer):
                    self._keep = False  # bytes after the body: do not reuse the connection
                break
            start, stop = end + 2, end + 2 + size
            if len(buffer) < stop + 2:
                break
            out.append(bytes(buffer[start:stop]))
            pos = stop + 2
        del buffer[:pos]
        return b"".join(out)

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self):
        if self._closed:
            return
        self._closed = True
        self._watchdog.cancel()
        if self._done and self._keep and not self.reader.at_eof():
            self.pool._release(self.key, self.reader, self.writer)
        else:
            self.writer.close()  # unread body (a disconnect): closing tells the lane to stop


class LaneClient:
    """Pooled HTTP/1.1 connections to lanes (plain HTTP)."""

    def __init__(self, max_idle_per_host: int = 64):
        self.idle: dict[tuple, list] = defaultdict(list)
        self.max_idle = max_idle_per_host

    def _release(self, key, reader, writer):
        idle = self.idle[key]
        if len(idle) < self.max_idle:
            idle.append((reader, writer))
        else:
            writer.close()

    async def send(self, method: str, url: str, headers: dict, content: bytes,
                   timeout: float | None = None, connect_timeout: float = 5.0) -> LaneResponse:
        parts = urlsplit(url)
        key = (parts.hostname, parts.port or 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"{method} {target} HTTP/1.1", f"host: {parts.netloc}", f"content-length: {len(content)}"]
        head += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content
        timeout = timeout or settings.STRATA_UPSTREAM_TIMEOUT
        idle = self.idle[key]
        while idle:
            reader, writer = idle.pop()
            if reader.at_eof() or writer.is_closing():
                writer.close()
                continue
            try:
                return await self._exchange(key, reader, writer, request, timeout)
            except _Stale:
                continue  # the lane had closed this idle connection: take another
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*key, limit=1 << 20), connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {parts.netloc}: {exc!r}")
        try:
            return await self._exchange(key, reader, writer, request, timeout)
        except _Stale as exc:
            raise UpstreamError(f"{parts.netloc} closed the connection before answering: {exc}")

    async def _exchange(self, key, reader, writer, request: bytes, timeout: float) -> LaneResponse:
        try:
            writer.write(request)
            async with asyncio.timeout(timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            writer.close()
            raise _Stale(repr(exc))
        except TimeoutError:
            writer.close()
            raise UpstreamError(f"no answer in {timeout:g} s")
        except BaseException:
            writer.close()
            raise
        lines = head[:-4].split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            writer.close()
            raise UpstreamError(f"not an HTTP response: {lines[0][:100]!r}")
        raw = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            raw.append((name.strip().lower(), value.strip()))
        return LaneResponse(self, key, reader, writer, status, Headers(raw), timeout)


class _Stale(Exception):
    """The connection was closed before a response head arrived."""


_lanes: LaneClient | None = None


def lane_client() -> LaneClient:
    global _lanes
    if _lanes is None:
        _lanes = LaneClient()
    return _lanes
