"""Start the real Strata processes (lanes with engines, gateway) on free ports, for tests and benchmarks.

Each Stack has its own var/ folder (database, keys, logs), so it never touches the
developer's data. Processes die with the test run (PR_SET_PDEATHSIG) even if it crashes.
"""

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Stack:
    """A running gateway plus lanes; `stop()` ends them all."""

    def __init__(self, var_dir: Path, lanes=("fast", "normal"), lane_settings: dict | None = None):
        self.var_dir = Path(var_dir)
        self.lanes = list(lanes)
        self.lane_settings = lane_settings or {}  # {lane name: {Lane field: value}} applied before start
        self.env = {**os.environ, "STRATA_VAR_DIR": str(self.var_dir), "DJANGO_SETTINGS_MODULE": "stratasite.settings"}
        self.procs: dict[str, subprocess.Popen] = {}
        self.gateway_port = free_port()
        self.lane_ports = {name: free_port() for name in self.lanes}

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def lane_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.lane_ports[name]}"

    @property
    def lane_key(self) -> str:
        return (self.var_dir / "lane.key").read_text().strip()

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run `manage.py ARGS` against this stack's database."""
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, check=check
        )

    def django(self, code: str):
        """Run Python in a Django shell of this stack; returns what the code printed as JSON."""
        out = self.manage("shell", "--no-imports", "-c", code).stdout.strip().splitlines()
        return json.loads(out[-1]) if out else None

    def create_key(self, name: str = "test") -> str:
        return self.manage("create_api_key", "--name", name).stdout.strip().splitlines()[-1]

    def start(self, timeout: float = 180):
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.manage("migrate", "--verbosity", "0")
        settings = {name: {**self.lane_settings.get(name, {}), "port": port} for name, port in self.lane_ports.items()}
        self.manage("shell", "--no-imports", "-c",
                    f"from lanes.models import Lane\nfor n, f in {settings!r}.items(): Lane.objects.filter(name=n).update(**f)")
        for name in self.lanes:
            self._spawn(name, "runlane", name)
        self._spawn("gateway", "rungateway", "--host", "127.0.0.1", "--port", str(self.gateway_port))
        self.wait_ready(timeout)
        return self

    def _spawn(self, label: str, *args: str):
        log = open(self.var_dir / f"{label}.log", "ab")
        self.procs[label] = subprocess.Popen(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self, timeout: float = 180):
        """Wait until /health says every lane's engine is ready."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for label, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{label} exited with {proc.returncode}:\n{self.log(label)[-3000:]}")
            try:
                last = httpx.get(self.gateway_url + "/health", timeout=5).json()
                if all(last["lanes"].get(n, {}).get("state") == "ready" for n in self.lanes):
                    return last
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"stack not ready in {timeout}s; last health: {last}")

    def engine_pid(self, lane: str) -> int:
        """The pid of a lane's engine child process (read from /proc)."""
        pid = self.procs[lane].pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for child in children:
            if "engine" in Path(f"/proc/{child}/cmdline").read_text():
                return int(child)
        raise LookupError(f"lane {lane} has no engine child")

    def log(self, label: str) -> str:
        return (self.var_dir / f"{label}.log").read_text(errors="replace")

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def gateway_over_fake_lane(var_dir: Path, *fake_lane_args: str):
    """A running gateway whose lane `fast` is tests/gateway/fakelane.py (the real LaneApp on a scripted engine)
    in its own process; yields (stack, lane_url). For benchmarks that isolate the gateway from the model."""
    stack = Stack(var_dir, lanes=())
    port = free_port()
    stack.var_dir.mkdir(parents=True, exist_ok=True)
    stack.manage("migrate", "--verbosity", "0")
    lane = subprocess.Popen([sys.executable, str(ROOT / "tests" / "gateway" / "fakelane.py"), "--port", str(port),
                             "--key", stack.lane_key, *fake_lane_args], cwd=ROOT, env=stack.env)
    try:
        stack.django("from lanes.models import Lane\nl = Lane.objects.get(name='fast')\n"
                     f"l.port = {port}\nl.save()\nprint(1)")  # .save(): the gateway's route cache hears of it
        stack.start()
        lane_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(lane_url + "/health", headers={"authorization": f"Bearer {stack.lane_key}"}).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the scripted lane did not come up")
            time.sleep(0.2)
        yield stack, lane_url
    finally:
        stack.stop()
        lane.terminate()
        lane.wait(10)
