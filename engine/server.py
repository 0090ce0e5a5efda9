"""The engine process: one lane connection on a Unix socket, JSON lines in, JSON lines out.

Order of life: die-with-parent is armed, the socket listens, a thread accepts the lane
(which may connect before the model is loaded) and reads its lines into a queue, the
main thread loads the model, says `ready`, then runs the scheduler until the lane hangs
up. EOF from the lane ends the process: the engine never outlives its lane.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import signal
import socket
import sys
import threading
import time

from . import protocol

_EOF = object()  # queued by the reader when the lane hangs up
_PR_SET_PDEATHSIG = 1


def log(message: str) -> None:
    """One plain line on stderr."""
    print(f"engine: {message}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """Ask Linux to send us SIGTERM when our parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}")
            return
    except (OSError, AttributeError) as exc:
        log(f"prctl unavailable: {exc}")
        return
    # The parent may have died between reading its pid and prctl; then we were reparented.
    # (Not `== 1`: a lane running as a container's init legitimately has pid 1.)
    if os.getppid() != parent:
        log("parent already gone; exiting")
        os._exit(0)


class Connection:
    """The one lane connection: a reader thread feeding `inbox`, and a locked writer."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.inbox: queue.Queue = queue.Queue()
        self.sock: socket.socket | None = None
        self.loaded = threading.Event()
        self._write_lock = threading.Lock()
        self._connected = threading.Event()
        if os.path.exists(socket_path):
            os.unlink(socket_path)  # a stale socket from an engine that died
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(socket_path)
        self._listener.listen(1)
        threading.Thread(target=self._accept_and_read, name="lane-reader", daemon=True).start()

    def _accept_and_read(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError as exc:
            log(f"accept failed: {exc}")
            self._hang_up()
            return
        # One lane only: stop listening so nothing else can attach.
        self._listener.close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        self.sock = sock
        self._connected.set()
        log("lane connected")
        buf = sock.makefile("rb")
        try:
            for line in buf:
                if line.strip():
                    self.inbox.put(line)
        except OSError as exc:
            log(f"read failed: {exc}")
        self._hang_up()

    def _hang_up(self) -> None:
        log("lane hung up; exiting")
        self.inbox.put(_EOF)
        if not self.loaded.is_set():
            # The main thread is inside the model load and cannot look at the queue.
            os._exit(0)

    def wait_connected(self) -> None:
        """Block until the lane has connected."""
        self._connected.wait()

    def send(self, message: dict) -> None:
        """Write one message; callable from any thread. A dead lane ends the process."""
        data = protocol.encode(message)
        with self._write_lock:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                log(f"write failed ({exc}); exiting")
                os._exit(0)


def serve(args: argparse.Namespace) -> int:
    """Run the engine until the lane hangs up; returns the exit status."""
    # SIGTERM keeps its default action (terminate at once, even inside a llama.cpp call).
    die_with_parent()
    conn = Connection(args.socket)
    log(f"listening on {args.socket}")

    # Imported late: loading llama.cpp's shared library takes a moment, and the lane may
    # already be waiting to connect.
    from .binding import LoadOptions, Model
    from .scheduler import Scheduler

    t0 = time.perf_counter()
    try:
        model = Model(LoadOptions(
            model_path=args.model, n_ctx=args.n_ctx, n_threads=args.threads, n_batch=args.n_batch,
            n_seq_max=args.slots, kv_type=args.kv_type, use_mmap=not args.no_mmap,
            n_gpu_layers=args.n_gpu_layers, kv_unified=args.kv_unified, flash_attn=args.flash_attn,
            verbose=args.verbose,
        ))
    except (OSError, ValueError, RuntimeError) as exc:
        log(f"load failed: {exc}")
        conn.loaded.set()
        conn.wait_connected()
        conn.send({"op": protocol.ERROR, "id": None, "message": f"the engine could not load the model: {exc}"})
        return 1
    conn.loaded.set()
    log(f"loaded {os.path.basename(args.model)} ({model.description}) in {time.perf_counter() - t0:.1f}s: "
        f"n_ctx {model.n_ctx} per slot, {model.n_seq} slots, n_batch {model.n_batch}, kv {args.kv_type}")

    scheduler = Scheduler(model, conn.send, step_tokens=args.step_tokens)
    conn.wait_connected()
    conn.send({"op": protocol.READY, "n_ctx": model.n_ctx, "n_slots": model.n_seq,
               "model": os.path.basename(args.model), "desc": model.description, "n_vocab": model.n_vocab})
    try:
        run_loop(conn, scheduler)
    finally:
        scheduler.close()
        model.close()
    return 0


def run_loop(conn: Connection, scheduler) -> None:
    """Handle lane messages between steps; block only when there is nothing to run."""
    while True:
        block = not scheduler.has_work()
        while True:
            try:
                line = conn.inbox.get(block=block)
            except queue.Empty:
                break
            block = False
            if line is _EOF:
                return
            handle(line, conn, scheduler)
        if scheduler.has_work():
            try:
                scheduler.step()
            except Exception as exc:  # noqa: BLE001 - a bug must cost the requests, not the lane's engine
                log(f"step failed: {type(exc).__name__}: {exc}")
                scheduler.fail_all(f"engine step failed: {exc}")


def handle(line: bytes, conn: Connection, scheduler) -> None:
    """Dispatch one lane message; a bad one becomes an `error` reply, never an exception."""
    try:
        msg = protocol.decode(line)
        if not isinstance(msg, dict):
            raise ValueError("a message must be a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        conn.send({"op": protocol.ERROR, "id": None, "message": f"bad message: {exc}"})
        return
    op = msg.get("op")
    try:
        if op == protocol.GENERATE:
            scheduler.submit(msg)
        elif op == protocol.CANCEL:
            if not scheduler.cancel(str(msg.get("id"))):
                log(f"cancel for unknown id {msg.get('id')!r} (already finished?)")
        elif op == protocol.SLOTS:
            conn.send({"op": protocol.SLOTS, "slots": scheduler.slots_state()})
        else:
            conn.send({"op": protocol.ERROR, "id": msg.get("id"), "message": f"unknown op {op!r}"})
    except Exception as exc:  # noqa: BLE001 - the boundary: errors become messages, not tracebacks
        log(f"{op} failed: {type(exc).__name__}: {exc}")
        conn.send({"op": protocol.ERROR, "id": msg.get("id"), "message": f"{op} failed: {exc}"})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `python -m engine`."""
    p = argparse.ArgumentParser(prog="python -m engine", description="Strata engine: token ids in, token ids out.")
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--socket", required=True, help="Unix socket path to listen on")
    p.add_argument("--n-ctx", type=int, default=8192, help="context per slot (tokens)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slots", type=int, default=4, help="sequences decoded together")
    p.add_argument("--n-batch", type=int, default=512, help="most tokens in one llama_decode")
    p.add_argument("--step-tokens", type=int, default=None,
                   help="per-step token budget (decode + prefill chunk); default n-batch")
    p.add_argument("--kv-type", choices=["f16", "q8_0"], default="f16")
    p.add_argument("--kv-unified", action="store_true", help="one KV buffer shared by all slots")
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                   help="on: faster prefill; off: faster decode at long context (CPU, measured)")
    p.add_argument("--no-mmap", action="store_true", help="read the weights instead of mapping them")
    p.add_argument("--n-gpu-layers", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="keep llama.cpp's info logs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; any unexpected failure is one log line and exit status 1."""
    args = parse_args(argv)
    try:
        return serve(args)
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # noqa: BLE001 - one line on stderr, no traceback to the lane
        log(f"fatal: {type(exc).__name__}: {exc}")
        return 1
