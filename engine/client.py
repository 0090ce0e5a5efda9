"""A small blocking engine client for tests and benchmarks: spawns `python -m engine` and talks to it.

The lane has its own asynchronous client; this one exists so that tests and `bench/` drive
the real process over the real socket without any of the lane's machinery.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from . import protocol

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Result:
    """What came back for one request: its tokens, arrival times, and the final done/error message."""

    id: str
    tokens: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)  # perf_counter at each token's arrival
    done: dict | None = None
    error: dict | None = None

    @property
    def finish_reason(self) -> str | None:
        return self.done["finish_reason"] if self.done else None

    @property
    def usage(self) -> dict:
        return self.done["usage"] if self.done else {}


class EngineProcess:
    """One engine child on a temporary socket; use as a context manager."""

    def __init__(self, model_path: str, *, slots: int = 1, n_ctx: int = 2048, threads: int = 2,
                 extra_args: tuple[str, ...] = (), ready_timeout: float = 120.0, stderr=None):
        self._tmp = tempfile.TemporaryDirectory(prefix="strata-engine-")
        self.socket_path = os.path.join(self._tmp.name, "engine.sock")
        cmd = [sys.executable, "-m", "engine", "--model", model_path, "--socket", self.socket_path,
               "--n-ctx", str(n_ctx), "--threads", str(threads), "--slots", str(slots), *extra_args]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stderr=stderr)
        self._ids = itertools.count()
        self._buf = b""
        self.sock = self._connect(ready_timeout)
        self.ready = self.recv(timeout=ready_timeout)
        if self.ready.get("op") != protocol.READY:
            self.close()
            raise RuntimeError(f"engine did not get ready: {self.ready}")

    def _connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited with {self.proc.returncode} before listening")
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self.socket_path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise TimeoutError("engine socket never appeared") from None
                time.sleep(0.02)

    def send(self, message: dict) -> None:
        """Write one protocol message."""
        self.sock.sendall(protocol.encode(message))

    def recv(self, timeout: float = 60.0) -> dict:
        """Read the next message; raises TimeoutError, or EOFError when the engine hung up."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError(f"no message from the engine in {timeout}s") from None
            if not chunk:
                raise EOFError("the engine closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def start(self, prompt: list[int], max_tokens: int, *, temperature: float = 0.0, top_p: float = 1.0,
              top_k: int = 0, seed: int | None = None, stop_ids: list[int] | None = None,
              request_id: str | None = None, **extra) -> str:
        """Send a generate message and return its id without waiting."""
        rid = request_id or f"req-{next(self._ids)}"
        self.send({"op": protocol.GENERATE, "id": rid, "prompt": list(prompt), "max_tokens": max_tokens,
                   "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
                   "stop_ids": stop_ids or [], **extra})
        return rid

    def collect(self, ids: list[str], timeout: float = 120.0, on_message=None) -> dict[str, Result]:
        """Read until every id has a done or error; other messages go to on_message (if given)."""
        results = {rid: Result(rid) for rid in ids}
        open_ids = set(ids)
        deadline = time.monotonic() + timeout
        while open_ids:
            msg = self.recv(timeout=max(deadline - time.monotonic(), 0.001))
            now = time.perf_counter()
            res = results.get(msg.get("id"))
            op = msg.get("op")
            if res is None:
                if on_message:
                    on_message(msg)
                continue
            if op == protocol.TOKENS:
                res.tokens.extend(msg["ids"])
                res.token_times.extend([now] * len(msg["ids"]))
            elif op == protocol.DONE:
                res.done = msg
                open_ids.discard(res.id)
            elif op == protocol.ERROR:
                res.error = msg
                open_ids.discard(res.id)
            elif on_message:
                on_message(msg)
        return results

    def generate(self, prompt: list[int], max_tokens: int, timeout: float = 120.0, **kwargs) -> Result:
        """Run one request to its end."""
        rid = self.start(prompt, max_tokens, **kwargs)
        return self.collect([rid], timeout=timeout)[rid]

    def slots(self, timeout: float = 30.0) -> list[dict]:
        """Ask for the slots' state (skipping any other message that arrives first)."""
        self.send({"op": protocol.SLOTS})
        while True:
            msg = self.recv(timeout=timeout)
            if msg.get("op") == protocol.SLOTS:
                return msg["slots"]

    def close(self, timeout: float = 10.0) -> int | None:
        """Hang up and wait for the engine to exit; returns its exit status (killed if it lingers)."""
        try:
            self.sock.close()
        except (AttributeError, OSError):
            pass
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self._tmp.cleanup()
        return rc

    def __enter__(self) -> "EngineProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
