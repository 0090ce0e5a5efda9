"""The engine as a process: startup order, bad input at the boundary, and dying with its lane."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from engine.client import REPO_ROOT


def _gone(pid: int) -> bool:
    """True when pid no longer runs (absent, or a zombie waiting for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _lines(sock: socket.socket, n: int, timeout: float = 60.0) -> list[dict]:
    sock.settimeout(timeout)
    buf = b""
    while buf.count(b"\n") < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return [json.loads(x) for x in buf.split(b"\n")[:n] if x]


def _connect(path: str, proc: subprocess.Popen, timeout: float = 60.0) -> socket.socket:
    """Connect to the engine's socket as a lane does, waiting while the engine (still running) creates it."""
    sock = socket.socket(socket.AF_UNIX)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            assert time.monotonic() < deadline and proc.poll() is None, "engine never listened"
            time.sleep(0.01)


def test_requests_sent_before_ready_are_served(model_path, ref, questions):
    """The lane may connect and send before the model is loaded: `ready` comes first, then the answer."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "e.sock")
        proc = subprocess.Popen([sys.executable, "-m", "engine", "--model", model_path, "--socket", path,
                                 "--slots", "1", "--n-ctx", "512"], cwd=REPO_ROOT)
        try:
            sock = _connect(path, proc)
            prompt = ref.chat(questions[0])
            sock.sendall(json.dumps({"op": "generate", "id": "early", "prompt": prompt, "max_tokens": 3,
                                     "temperature": 0, "top_p": 1, "top_k": 0, "seed": None,
                                     "stop_ids": []}).encode() + b"\n")
            msgs = _lines(sock, 5)
            assert [m["op"] for m in msgs] == ["ready", "tokens", "tokens", "tokens", "done"]
            assert [m["ids"][0] for m in msgs[1:4]] == ref.greedy(prompt, 3)[0]
            sock.close()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_bad_messages_become_error_messages(engine, ref, questions):
    """Malformed JSON, unknown ops and invalid requests get `error` replies; the engine keeps serving."""
    engine.sock.sendall(b"this is not json\n")
    assert engine.recv()["op"] == "error"
    engine.send({"op": "launch_missiles", "id": "x"})
    err = engine.recv()
    assert err == {"op": "error", "id": "x", "message": "unknown op 'launch_missiles'"}
    for bad, word in [({"prompt": []}, "prompt"), ({"prompt": [1, 49152]}, "prompt"),
                      ({"max_tokens": 0}, "max_tokens"), ({"temperature": "hot"}, "temperature"),
                      ({"prompt": [1] * 5000}, "too long")]:
        msg = {"op": "generate", "id": "bad", "prompt": [1, 2, 3], "max_tokens": 4, **bad}
        engine.send(msg)
        reply = engine.recv()
        assert reply["op"] == "error" and reply["id"] == "bad" and word in reply["message"], reply
    assert "Traceback" not in json.dumps(reply)
    ok = engine.generate(ref.chat(questions[0]), 2)
    assert ok.finish_reason == "length" and len(ok.tokens) == 2


def test_duplicate_running_id_is_refused(fresh_engine, ref, questions):
    """A second generate with the id of a running request is an error; the first still completes."""
    e = fresh_engine(slots=2)
    prompt = ref.chat(questions[1])
    e.start(prompt, 8, request_id="same")
    e.start(prompt, 8, request_id="same")
    msgs = []
    while not any(m["op"] == "done" for m in msgs):
        msgs.append(e.recv())
    assert [m for m in msgs if m["op"] == "error"][0]["id"] == "same"
    assert sum(len(m["ids"]) for m in msgs if m["op"] == "tokens") == 8


def test_engine_exits_when_lane_hangs_up(fresh_engine):
    """Closing the lane's connection (EOF) makes the engine exit cleanly within seconds."""
    e = fresh_engine(slots=1)
    pid = e.proc.pid
    e.sock.close()
    assert e.proc.wait(timeout=10) == 0
    assert _gone(pid)


def test_engine_dies_with_its_parent(model_path):
    """If the lane process is killed outright (no EOF sent by it), PR_SET_PDEATHSIG takes the engine down too."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "e.sock")
        # A stand-in lane: starts the engine, prints its pid, then sleeps without ever connecting.
        lane = subprocess.Popen([sys.executable, "-c", (
            "import subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-m', 'engine', '--model', {model_path!r},"
            f" '--socket', {path!r}, '--slots', '1', '--n-ctx', '256'], cwd={REPO_ROOT!r})\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
        try:
            engine_pid = int(lane.stdout.readline())
            deadline = time.monotonic() + 60
            while not os.path.exists(path):  # the engine is up and past prctl
                assert time.monotonic() < deadline and not _gone(engine_pid), "engine never listened"
                time.sleep(0.02)
            assert not _gone(engine_pid)
            lane.send_signal(signal.SIGKILL)
            lane.wait()
            assert _wait_gone(engine_pid, 10), "engine outlived its parent"
        finally:
            if lane.poll() is None:
                lane.kill()
                lane.wait()
            if not _gone(engine_pid):
                os.kill(engine_pid, signal.SIGKILL)


def test_load_failure_is_one_error_message_then_exit(tmp_path):
    """A model that cannot load is reported to the lane as one `error` (no traceback), then the engine exits 1."""
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all")
    path = str(tmp_path / "e.sock")
    proc = subprocess.Popen([sys.executable, "-m", "engine", "--model", str(bad), "--socket", path,
                             "--slots", "1", "--n-ctx", "256"], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        sock = _connect(path, proc)
        msgs = _lines(sock, 2)
        assert len(msgs) == 1 and msgs[0]["op"] == "error" and msgs[0]["id"] is None
        assert "could not load" in msgs[0]["message"]
        assert proc.wait(timeout=10) == 1
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tensor_overrides_reach_llama_cpp(model_path, ref, questions, tmp_path):
    """--n-cpu-moe and --override-tensor become llama.cpp tensor buffer overrides: the engine logs the MoE
    patterns, llama.cpp reports the matched dense tensor placed in CPU memory, and generation is unchanged."""
    from engine.client import EngineProcess

    log_path = tmp_path / "engine.log"
    with open(log_path, "w") as log, EngineProcess(
            model_path, slots=1, n_ctx=256, stderr=log,
            extra_args=("--n-cpu-moe", "2", "--override-tensor", r"blk\.0\.ffn_up=CPU", "--verbose")) as e:
        prompt = ref.chat(questions[0])
        res = e.generate(prompt, 3)
    text = log_path.read_text()
    assert r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU" in text  # the second MoE block's pattern
    assert "tensor blk.0.ffn_up.weight" in text and "buffer type overridden to CPU" in text
    assert res.tokens == ref.greedy(prompt, 3)[0]


def test_unknown_buffer_type_is_a_load_error(model_path, tmp_path):
    """--override-tensor to a buffer type this build lacks fails the load with a message naming the known ones."""
    path = str(tmp_path / "e.sock")
    proc = subprocess.Popen([sys.executable, "-m", "engine", "--model", model_path, "--socket", path,
                             "--slots", "1", "--n-ctx", "256", "--override-tensor", "exps=CUDA7"],
                            cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        sock = _connect(path, proc)
        msgs = _lines(sock, 1)
        assert msgs[0]["op"] == "error" and "unknown buffer type 'CUDA7'" in msgs[0]["message"]
        assert "CPU" in msgs[0]["message"]
        assert proc.wait(timeout=10) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
