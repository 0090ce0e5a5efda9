"""A lane served by uvicorn in a background thread of this process, for tests and benchmarks.

Real HTTP on a free loopback port (so the official SDKs stream from it as from a lane
process), while the test keeps a hand on the `LaneRuntime` (its engine, its settings).
"""

import socket
import threading
import time

import httpx
import uvicorn

from .config import LaneRuntime
from .server import LaneApp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedLane:
    """`start()` serves `runtime` and waits until its engine is ready; `stop()` shuts it down."""

    def __init__(self, runtime: LaneRuntime, port: int | None = None):
        self.runtime = runtime
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"authorization": f"Bearer {runtime.lane_key}"}
        config = uvicorn.Config(LaneApp(runtime), host="127.0.0.1", port=self.port, lifespan="on",
                                log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"lane-{runtime.name}", daemon=True)

    def start(self, ready_timeout: float = 180) -> "ThreadedLane":
        self.thread.start()
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", headers=self.headers, timeout=2).json().get("state") == "ready":
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"lane {self.runtime.name!r} not ready in {ready_timeout}s")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)
