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
    from .binding import LoadOptions, Model, moe_cpu_patterns
    from .scheduler import Scheduler, StepPolicy

    t0 = time.perf_counter()
    try:
        overrides = [(pattern, "CPU") for pattern in moe_cpu_patterns(args.n_cpu_moe, args.cpu_moe)]
        overrides += list(args.override_tensor)
        if overrides:
            log(f"tensor overrides: {', '.join(f'{p}={b}' for p, b in overrides)}")
        model = Model(LoadOptions(
            model_path=args.model, n_ctx=args.n_ctx, n_threads=args.threads, n_batch=args.n_batch,
            n_seq_max=args.slots, kv_type=args.kv_type, use_mmap=not args.no_mmap, use_mlock=args.mlock,
            n_gpu_layers=args.n_gpu_layers, main_gpu=args.main_gpu, split_mode=args.split_mode,
            offload_kqv=not args.no_kv_offload, tensor_overrides=tuple(overrides),
            kv_unified=args.kv_unified, flash_attn=args.flash_attn, verbose=args.verbose,
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

    policy = StepPolicy(chunk_tokens=args.step_tokens, interactive_ms=args.interactive_ms,
                        interactive_tokens=args.interactive_tokens, min_prefill_tokens=args.min_prefill_tokens)
    scheduler = Scheduler(model, conn.send, policy=policy, log_steps=args.log_steps)
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


def _override(value: str) -> tuple[str, str]:
    """`PATTERN=BUFFER` for --override-tensor."""
    pattern, sep, buft = value.rpartition("=")
    if not sep or not pattern or not buft:
        raise argparse.ArgumentTypeError(f"expected PATTERN=BUFFER (e.g. 'exps=CPU'), not {value!r}")
    return pattern, buft


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `python -m engine`."""
    p = argparse.ArgumentParser(
        prog="python -m engine", description="Strata engine: token ids in, token ids out (one lane per engine).")
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--socket", required=True, help="Unix socket path to listen on")
    p.add_argument("--verbose", action="store_true", help="keep llama.cpp's info logs")
    p.add_argument("--log-steps", action="store_true",
                   help="one stderr line per step: its mode, decode and prefill tokens, budget, duration")

    g = p.add_argument_group("context and slots")
    g.add_argument("--n-ctx", type=int, default=8192,
                   help="context per slot (tokens): prompt + completion (default 8192)")
    g.add_argument("--threads", type=int, default=2, help="CPU threads for decode and prefill (default 2)")
    g.add_argument("--slots", type=int, default=4, help="sequences decoded together: concurrent requests (default 4)")
    g.add_argument("--n-batch", type=int, default=512,
                   help="most tokens in one llama_decode, i.e. one step (default 512)")
    g.add_argument("--kv-type", choices=["f16", "q8_0"], default="f16",
                   help="KV cache type; q8_0 halves its memory and needs flash attention (default f16)")
    g.add_argument("--kv-unified", action="store_true", help="one KV buffer shared by all slots")
    g.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                   help="on: faster prefill; off: faster decode at long context (CPU, measured; default auto)")

    g = p.add_argument_group(
        "step budget",
        "A step that hands a token to somebody (a stream is decoding, or the shortest waiting prompt "
        "finishes in it) is interactive: its prefill is capped so the step takes about --interactive-ms, "
        "using the measured seconds per token. Other steps read full --step-tokens chunks. Prompts are "
        "read shortest-remaining-first; the oldest gets --min-prefill-tokens every interactive step.")
    g.add_argument("--step-tokens", type=_positive, default=None,
                   help="tokens per throughput step (nobody waiting for a token); default: --n-batch")
    g.add_argument("--interactive-ms", type=float, default=500.0,
                   help="target duration of a step while somebody waits for a token (bounds the "
                        "inter-token delay that a long prompt's prefill adds to running streams; default 500)")
    g.add_argument("--interactive-tokens", type=_positive, default=None,
                   help="fixed prefill cap for interactive steps instead of the measured one")
    g.add_argument("--min-prefill-tokens", type=_positive, default=64,
                   help="interactive steps read at least this many prompt tokens; the oldest prompt "
                        "being read always gets this share, so none starves (default 64)")

    g = p.add_argument_group("memory and offload (llama.cpp)")
    g.add_argument("--no-mmap", action="store_true",
                   help="read the weights into memory instead of mapping the file")
    g.add_argument("--mlock", action="store_true", help="lock the weights in RAM (no swapping / page-out)")
    g.add_argument("--n-gpu-layers", type=int, default=0,
                   help="layers offloaded to the GPU, -1 for all (default 0; a CPU-only build ignores it)")
    g.add_argument("--main-gpu", type=int, default=0, help="GPU for the model when --split-mode none (default 0)")
    g.add_argument("--split-mode", choices=["none", "layer", "row"], default="layer",
                   help="how offloaded layers are split over several GPUs (default layer)")
    g.add_argument("--no-kv-offload", action="store_true",
                   help="keep the KV cache (and attention) in RAM even for offloaded layers")
    g.add_argument("--cpu-moe", action="store_true",
                   help="keep every MoE expert tensor in RAM (offload the rest with --n-gpu-layers)")
    g.add_argument("--n-cpu-moe", type=int, default=None, metavar="N",
                   help="keep the MoE expert tensors of the first N layers in RAM, the rest of those layers "
                        "offloaded by --n-gpu-layers (llama.cpp's --n-cpu-moe)")
    g.add_argument("--override-tensor", type=_override, action="append", default=[], metavar="PATTERN=BUFFER",
                   help="place tensors whose name matches the regex PATTERN in buffer type BUFFER "
                        "(CPU, CUDA0, ...); repeatable, first match wins (llama.cpp's -ot)")
    args = p.parse_args(argv)
    if args.n_cpu_moe is not None and args.n_cpu_moe < 0:
        p.error("--n-cpu-moe must be >= 0")
    return args


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
