"""A lane and its engine under trouble: queue full, engine killed, engine loading, client gone.

A dedicated stack with one lane of one slot and a queue of one, so that a single long
prompt (several seconds of prefill on these cores) keeps the engine busy on demand.
"""

import os
import signal
import threading
import time

import httpx
import pytest

from stack import Stack

pytestmark = pytest.mark.e2e

LONG_PROMPT = [{"role": "user", "content": "Summarise this: " + "the lighthouse keeper counted waves " * 700}]
SHORT = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def lane_stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("lifecycle-var"), lanes=("fast",), lane_settings={"fast": {"slots": 1, "max_queue": 1}})
    try:
        s.start()
        yield s
    finally:
        s.stop()


class Lane:
    def __init__(self, stack: Stack):
        self.url = stack.lane_url("fast")
        self.headers = {"authorization": f"Bearer {stack.lane_key}"}

    def post(self, messages, **body):
        return httpx.post(self.url + "/v1/chat/completions", headers=self.headers,
                          json={"model": "m", "messages": messages, **body}, timeout=120)

    def open_stream(self, client: httpx.Client, messages, **body):
        request = client.build_request("POST", self.url + "/v1/chat/completions", headers=self.headers,
                                       json={"model": "m", "messages": messages, "stream": True, **body})
        return client.send(request, stream=True)

    def slots(self):
        return httpx.get(self.url + "/slots", headers=self.headers, timeout=30).json()["slots"]

    def health(self):
        return httpx.get(self.url + "/health", headers=self.headers, timeout=30).json()

    def wait_slots(self, predicate, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            slots = self.slots()
            if slots and predicate(slots):
                return slots
            time.sleep(0.1)
        raise AssertionError(f"slots never matched; last: {slots}")


@pytest.fixture
def lane(lane_stack):
    lane = Lane(lane_stack)
    lane.wait_slots(lambda slots: all(s["state"] == "idle" for s in slots))
    return lane


def test_slots_show_a_running_request_and_a_disconnect_frees_it(lane, prompt_tokens):
    """Closing the stream mid-prefill cancels it: the slot is freed before the prompt was read."""
    with httpx.Client(timeout=120) as client:
        response = lane.open_stream(client, LONG_PROMPT, max_tokens=4)
        busy = lane.wait_slots(lambda slots: slots[0]["state"] in ("prefill", "decode"))
        assert busy[0]["request_id"]
        response.close()  # the client goes away mid-prefill
    idle = lane.wait_slots(lambda slots: slots[0]["state"] == "idle", timeout=30)
    assert idle[0]["request_id"] is None
    assert idle[0]["cached_tokens"] < prompt_tokens(LONG_PROMPT)  # prefill was cut short, not finished
    assert lane.post(SHORT, max_tokens=2, temperature=0).status_code == 200


def test_queue_full_is_409_and_the_queued_request_still_runs(lane):
    with httpx.Client(timeout=120) as client:
        running = lane.open_stream(client, LONG_PROMPT, max_tokens=2)
        lane.wait_slots(lambda slots: slots[0]["state"] in ("prefill", "decode"))
        queued = lane.open_stream(client, SHORT, max_tokens=2, temperature=0)
        refused = lane.post(SHORT, max_tokens=2)
        assert refused.status_code == 409
        assert refused.json()["error"]["message"] == "a request is running or queued"
        running.close()
        body = queued.read().decode()
        assert "data: [DONE]" in body and '"finish_reason"' in body


def test_engine_killed_mid_stream_ends_the_stream_with_an_error_and_the_next_request_restarts_it(lane, lane_stack):
    restarts = lane.health()["restarts"]
    with httpx.Client(timeout=120) as client:
        response = lane.open_stream(client, LONG_PROMPT, max_tokens=4)
        lane.wait_slots(lambda slots: slots[0]["state"] in ("prefill", "decode"))
        os.kill(lane_stack.engine_pid("fast"), signal.SIGKILL)
        body = response.read().decode()
    assert "the engine stopped; the next request restarts it" in body
    assert body.rstrip().endswith("data: [DONE]")
    reply = lane.post(SHORT, max_tokens=3, temperature=0)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
    health = lane.health()
    assert health["state"] == "ready" and health["restarts"] == restarts + 1


def test_a_request_during_engine_load_gets_503(lane, lane_stack):
    os.kill(lane_stack.engine_pid("fast"), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while lane.health()["state"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first = {}
    restarter = threading.Thread(target=lambda: first.setdefault("r", lane.post(SHORT, max_tokens=2, temperature=0)))
    restarter.start()
    deadline = time.monotonic() + 10
    while lane.health()["state"] != "loading":  # the first request has started the engine
        assert time.monotonic() < deadline
        time.sleep(0.01)
    during_load = lane.post(SHORT, max_tokens=2)
    restarter.join(120)
    assert during_load.status_code == 503
    assert during_load.json()["error"]["message"] == "the engine is starting (a minute or two)"
    assert first["r"].status_code == 200  # the request that restarted the engine waited for it


def test_lane_stops_promptly_on_sigterm_after_a_client_disconnected(tmp_path):
    """A stream closed by its client must not leave its handler waiting forever: SIGTERM then stops the lane
    (and its engine) instead of hanging in uvicorn's graceful shutdown."""
    stack = Stack(tmp_path, lanes=("fast",))
    try:
        stack.start()
        lane = Lane(stack)
        with httpx.Client(timeout=120) as client:
            response = lane.open_stream(client, LONG_PROMPT, max_tokens=4)
            lane.wait_slots(lambda slots: any(s["state"] != "idle" for s in slots))
            response.close()
            lane.wait_slots(lambda slots: all(s["state"] == "idle" for s in slots))
            assert lane.post(SHORT, max_tokens=1).status_code == 200  # keeps a keep-alive connection open
            engine_pid = stack.engine_pid("fast")
            stack.procs["fast"].send_signal(signal.SIGTERM)
            stack.procs["fast"].wait(60)  # raises TimeoutExpired if the lane hangs
        assert not os.path.exists(f"/proc/{engine_pid}") or "zombie" in open(f"/proc/{engine_pid}/status").read().lower()
    finally:
        stack.stop()
