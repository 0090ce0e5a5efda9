"""The lane's side of its engine: start the child process, talk over the socket, restart after a death.

`EngineSupervisor.open()` admits a request (503 while loading, 409 when the queue is
full) and returns an `EngineStream` of the engine's messages for it. If the engine dies,
every open stream receives an error message and the next request starts it again.
"""

import asyncio
import logging
import os
import shlex
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from engine import protocol

from .dialects.errors import ApiError

log = logging.getLogger("strata.lane.engine")

ENGINE_STOPPED = "the engine stopped; the next request restarts it"
ENGINE_LOADING = "the engine is starting (a minute or two)"
QUEUE_FULL = "a request is running or queued"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class EngineOptions:
    """How to start the engine child (mirrors `python -m engine --help`)."""

    model_path: str
    n_ctx: int = 8192
    slots: int = 4
    threads: int = 2
    kv_type: str = "f16"
    max_queue: int = 16          # requests that may wait beyond the slots before 409
    load_timeout_s: float = 120.0
    extra: str = ""              # more engine options, as typed in the lane's settings

    def argv(self, socket_path: str) -> list[str]:
        return [
            sys.executable, "-m", "engine",
            "--model", self.model_path, "--socket", socket_path,
            "--n-ctx", str(self.n_ctx), "--slots", str(self.slots),
            "--threads", str(self.threads), "--kv-type", self.kv_type,
            *shlex.split(self.extra),
        ]


_CLOSED = object()  # queued by EngineStream.aclose() to end a pending read


class EngineStream:
    """The engine's messages for one request: `tokens` then `done`, or an `error`."""

    def __init__(self, supervisor: "EngineSupervisor", request_id: str):
        self.id = request_id
        self._supervisor = supervisor
        self._queue: asyncio.Queue = asyncio.Queue()
        self.finished = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self.finished:
            raise StopAsyncIteration
        message = await self._queue.get()
        if message is _CLOSED:
            raise StopAsyncIteration
        if message["op"] in (protocol.DONE, protocol.ERROR):
            self.finished = True
            self._supervisor._release(self)
        return message

    async def cancel(self):
        """Ask the engine to stop this request; its `done` (cancelled) still arrives."""
        if not self.finished:
            try:
                await self._supervisor._send({"op": protocol.CANCEL, "id": self.id})
            except OSError:
                pass  # the engine is gone; its death already ends this stream

    async def aclose(self):
        """Cancel if still running and stop listening (safe to call twice)."""
        if not self.finished:
            await self.cancel()
            self.finished = True
            self._supervisor._release(self)
            # Wake a reader still waiting on this stream: released, its `done` will never be routed here.
            self._queue.put_nowait(_CLOSED)


class EngineSupervisor:
    """Owns one engine child process and multiplexes requests over its socket."""

    def __init__(self, options: EngineOptions, name: str = "lane"):
        self.options = options
        self.name = name
        self.state = "stopped"  # stopped -> loading -> ready -> stopped (death) ...
        self.info: dict = {}
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._streams: dict[str, EngineStream] = {}
        self._ready: asyncio.Event | None = None
        self._slots_waiters: list[asyncio.Future] = []
        self._socket_path = os.path.join(tempfile.gettempdir(), f"strata-{name}-{os.getpid()}.sock")
        self._runner: asyncio.Task | None = None

    # --- lifecycle -------------------------------------------------------------

    async def start(self):
        """Start the engine child if it is not running; returns at once (it loads in the background)."""
        if self.state != "stopped":
            return
        self.state = "loading"
        self._ready = asyncio.Event()
        if os.path.exists(self._socket_path):
            os.unlink(self._socket_path)
        self._proc = await asyncio.create_subprocess_exec(
            *self.options.argv(self._socket_path), cwd=PROJECT_ROOT, stdin=asyncio.subprocess.DEVNULL
        )
        log.info("engine.start lane=%s pid=%s", self.name, self._proc.pid)
        self._runner = asyncio.create_task(self._run(self._proc))

    async def stop(self):
        """Stop the engine child and wait for it (used at lane shutdown)."""
        proc, self._proc = self._proc, None
        if self._writer:
            self._writer.close()
        if proc and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        if self._runner:
            await asyncio.gather(self._runner, return_exceptions=True)

    async def _run(self, proc: asyncio.subprocess.Process):
        try:
            reader, self._writer = await self._connect(proc)
            while line := await reader.readline():
                self._dispatch(protocol.decode(line))
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            log.warning("engine.connection_lost lane=%s error=%r", self.name, exc)
        finally:
            await self._engine_gone(proc)

    async def _connect(self, proc) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to the engine's socket, waiting while it creates it."""
        deadline = asyncio.get_running_loop().time() + self.options.load_timeout_s
        while True:
            if proc.returncode is not None:
                raise OSError(f"engine exited with status {proc.returncode} before it listened")
            try:
                return await asyncio.open_unix_connection(self._socket_path, limit=64 << 20)
            except (FileNotFoundError, ConnectionRefusedError):
                if asyncio.get_running_loop().time() > deadline:
                    raise OSError("engine did not listen in time")
                await asyncio.sleep(0.05)

    def _dispatch(self, message: dict):
        op = message.get("op")
        if op == protocol.READY:
            self.state, self.info = "ready", message
            self._ready.set()
            log.info("engine.ready lane=%s n_ctx=%s slots=%s", self.name, message.get("n_ctx"), message.get("n_slots"))
        elif op == protocol.SLOTS:
            waiters, self._slots_waiters = self._slots_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(message.get("slots", []))
        elif message.get("id") in self._streams:
            self._streams[message["id"]]._queue.put_nowait(message)
        elif op == protocol.ERROR:
            log.warning("engine.error lane=%s message=%s", self.name, message.get("message"))

    async def _engine_gone(self, proc):
        """The engine died or was stopped: end every open stream with an error."""
        was = self.state
        self.state, self._writer = "stopped", None
        if self._ready:
            self._ready.clear()
        for stream in list(self._streams.values()):
            stream._queue.put_nowait({"op": protocol.ERROR, "id": stream.id, "message": ENGINE_STOPPED})
        for fut in self._slots_waiters:
            if not fut.done():
                fut.set_result([])
        self._slots_waiters = []
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        if self._proc is proc:  # not our own shutdown
            self.restarts += 1
            level = logging.WARNING if proc.returncode == 0 else logging.ERROR
            log.log(level, "engine.exited lane=%s status=%s was=%s", self.name, proc.returncode, was)

    # --- requests ----------------------------------------------------------------

    async def open(self, request: dict) -> EngineStream:
        """Admit one generation request and send it; raises ApiError 503/409 when it cannot run."""
        if self.state == "stopped":
            # The engine died (or never started): this request restarts it and waits for it.
            await self.start()
            try:
                await asyncio.wait_for(self._ready.wait(), self.options.load_timeout_s)
            except asyncio.TimeoutError:
                raise ApiError(503, ENGINE_LOADING)
        if self.state != "ready":
            raise ApiError(503, ENGINE_LOADING)
        if len(self._streams) >= self.options.slots + self.options.max_queue:
            raise ApiError(409, QUEUE_FULL)
        stream = EngineStream(self, request.get("id") or uuid.uuid4().hex)
        self._streams[stream.id] = stream
        try:
            await self._send({"op": protocol.GENERATE, **request, "id": stream.id})
        except OSError:
            self._release(stream)
            raise ApiError(503, ENGINE_STOPPED)
        return stream

    async def slots(self) -> list[dict]:
        """The slots' state as the engine reports it ([] when it is not running)."""
        if self.state != "ready":
            return []
        fut = asyncio.get_running_loop().create_future()
        self._slots_waiters.append(fut)
        await self._send({"op": protocol.SLOTS})
        try:
            # The engine answers between steps; a long prefill step on a busy machine takes seconds.
            return await asyncio.wait_for(fut, 30)
        except asyncio.TimeoutError:
            raise ApiError(504, "the engine did not report its slots in time")

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    async def _send(self, message: dict):
        if self._writer is None:
            raise OSError("engine not connected")
        self._writer.write(protocol.encode(message))
        await self._writer.drain()

    def _release(self, stream: EngineStream):
        self._streams.pop(stream.id, None)
