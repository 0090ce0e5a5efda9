"""One real request end to end: openai SDK -> gateway -> lane -> engine (llama.cpp, SmolLM2) and back."""

import json
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "user", "content": "Name a colour."}]


def latest_record(stack):
    return stack.django(
        "import json\nfrom infer_archive.models import InferRecord as R\n"
        "r = R.objects.order_by('-started_at').first()\n"
        "print(json.dumps({k: getattr(r, k) for k in ('status','http_status','model','route','lane','dialect','stream',"
        "'prompt_tokens','completion_tokens','cached_tokens')} | {'api_key': r.api_key.name if r.api_key else None,"
        "'ttft_ms': r.ttft_ms, 'finished': r.finished_at is not None}))"
    )


@pytest.fixture
def client(stack, api_key):
    return openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=api_key, max_retries=0)


def test_health_is_public_and_reports_every_lane(stack):
    body = httpx.get(stack.gateway_url + "/health").json()
    assert body["status"] == "ok"
    assert {name: body["lanes"][name]["state"] for name in ("fast", "normal")} == {"fast": "ready", "normal": "ready"}


def test_non_streaming_answer_with_the_lanes_count(stack, client, prompt_tokens):
    reply = client.chat.completions.create(model="strata", messages=MESSAGES, max_tokens=8, temperature=0)
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content.strip()
    assert reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage.prompt_tokens == prompt_tokens(MESSAGES)
    assert 1 <= reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    record = latest_record(stack)
    assert record["status"] == "ok" and record["http_status"] == 200 and record["finished"]
    assert (record["lane"], record["route"], record["api_key"]) == ("normal", "strata", "pytest")
    assert record["prompt_tokens"] == reply.usage.prompt_tokens
    assert record["completion_tokens"] == reply.usage.completion_tokens


def test_streaming_answer_arrives_in_chunks_with_usage(stack, client, prompt_tokens):
    chunks = list(
        client.chat.completions.create(
            model="strata-fast", messages=MESSAGES, max_tokens=6, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert text.strip()
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2  # streamed, not one blob
    assert finishes in (["stop"], ["length"])
    assert usage.prompt_tokens == prompt_tokens(MESSAGES)
    assert 1 <= usage.completion_tokens <= 6
    record = latest_record(stack)
    assert (record["lane"], record["stream"], record["status"]) == ("fast", True, "ok")
    assert record["completion_tokens"] == usage.completion_tokens
    assert record["ttft_ms"] is not None and record["ttft_ms"] > 0


def test_stream_without_include_usage_still_records_usage(stack, client):
    stream = client.chat.completions.create(model="strata-fast", messages=MESSAGES, max_tokens=4, temperature=0, stream=True)
    chunks = list(stream)
    assert all(c.usage is None for c in chunks)  # the client did not ask for it
    record = latest_record(stack)
    assert record["completion_tokens"] is not None and 1 <= record["completion_tokens"] <= 4


def test_greedy_answers_agree_between_gateway_and_lane(stack, client):
    """The gateway passes the lane's bytes through: same greedy text either way."""
    via_gateway = client.chat.completions.create(model="strata", messages=MESSAGES, max_tokens=8, temperature=0)
    direct = httpx.post(
        stack.lane_url("normal") + "/v1/chat/completions",
        headers={"authorization": f"Bearer {stack.lane_key}"},
        json={"model": "strata", "messages": MESSAGES, "max_tokens": 8, "temperature": 0},
        timeout=60,
    ).json()
    assert via_gateway.choices[0].message.content == direct["choices"][0]["message"]["content"]


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer sk-strata-wrong"}, {"x-api-key": "nope"}])
def test_missing_or_wrong_key_is_401_not_logged_in(stack, headers):
    r = httpx.post(stack.gateway_url + "/v1/chat/completions", headers=headers,
                   json={"model": "strata", "messages": MESSAGES})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "NOT_LOGGED_IN"


def test_sdk_sees_authentication_error(stack):
    bad = openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key="sk-strata-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model="strata", messages=MESSAGES, max_tokens=2)
    assert info.value.code == "NOT_LOGGED_IN"


def test_revoked_key_is_refused(stack):
    key = stack.create_key("to-revoke")
    headers = {"authorization": f"Bearer {key}"}
    body = {"model": "strata", "messages": MESSAGES, "max_tokens": 1}
    assert httpx.post(stack.gateway_url + "/v1/chat/completions", headers=headers, json=body, timeout=60).status_code == 200
    stack.manage("api_keys", "revoke", "to-revoke")  # the gateway caches keys: the command tells it at once
    assert httpx.post(stack.gateway_url + "/v1/chat/completions", headers=headers, json=body).status_code == 401


def test_the_upstream_lane_key_never_reaches_the_client(stack, api_key):
    r = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                   json={"model": "strata", "messages": MESSAGES, "max_tokens": 2}, timeout=60)
    assert stack.lane_key not in r.text and stack.lane_key not in str(r.headers)


def test_lane_refuses_requests_without_its_internal_key(stack, api_key):
    r = httpx.post(stack.lane_url("fast") + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                   json={"model": "strata", "messages": MESSAGES})
    assert r.status_code == 401


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b'{"model": "strata", "messages": [', "not valid JSON"),
        (b'{"model": "strata"}', "'messages' is required"),
        (b'["not", "an", "object"]', "must be a JSON object"),
        (b'{"model": "strata", "messages": [{"role": "wizard", "content": "hi"}]}', "role must be"),
        (b'{"model": "strata", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -3}', "max_tokens"),
        (b'{"model": "strata", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}', "temperature"),
    ],
)
def test_bad_input_is_a_400_in_openai_shape(stack, api_key, content, fragment):
    r = httpx.post(stack.gateway_url + "/v1/chat/completions", content=content,
                   headers={"authorization": f"Bearer {api_key}", "content-type": "application/json"}, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    assert "Traceback" not in r.text


def test_unknown_model_without_default_route_is_a_400(stack, api_key):
    # A save (not a queryset update) signals the gateway's route cache, as an admin edit does.
    toggle = ("from gateway.models import ModelRoute\nr = ModelRoute.objects.get(model_name='strata')\n"
              "r.is_default = {}\nr.save()\nprint(1)")
    stack.django(toggle.format(False))
    try:
        r = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                       json={"model": "no-such-model", "messages": MESSAGES})
    finally:
        stack.django(toggle.format(True))
    assert r.status_code == 400
    assert "no-such-model" in r.json()["error"]["message"]
    assert latest_record(stack)["status"] == "rejected"


def test_unknown_model_goes_to_the_default_route(stack, client):
    reply = client.chat.completions.create(model="gpt-unknown", messages=MESSAGES, max_tokens=2, temperature=0)
    assert reply.usage.completion_tokens >= 1
    record = latest_record(stack)
    assert (record["model"], record["route"], record["lane"]) == ("gpt-unknown", "strata", "normal")


def test_create_api_key_prints_the_key_alone_and_stores_only_its_hash(stack):
    out = stack.manage("create_api_key", "--name", "hash-check").stdout
    raw = out.strip().splitlines()[-1]
    assert raw.startswith("sk-strata-") and " " not in raw
    stored = stack.django(
        "import json\nfrom gateway.models import ApiKey\nk = ApiKey.objects.get(name='hash-check')\n"
        "print(json.dumps([k.key_hash, k.prefix]))"
    )
    import hashlib

    assert stored[0] == hashlib.sha256(raw.encode()).hexdigest() and raw not in stored
    assert raw.startswith(stored[1])


def test_client_disconnect_is_recorded_and_stops_generation(stack, api_key, prompt_tokens):
    """Closing the stream at the gateway cancels upstream: the row says disconnected, the lane's slot frees."""
    long_messages = [{"role": "user", "content": "Summarise: " + "waves and wind and light " * 1200}]  # ~6K tokens: many prefill steps
    lane_headers = {"authorization": f"Bearer {stack.lane_key}"}

    def busy_slots():
        slots = httpx.get(stack.lane_url("fast") + "/slots", headers=lane_headers, timeout=30).json()["slots"]
        return [s for s in slots if s["state"] != "idle"]

    with httpx.Client(timeout=120) as http:
        request = http.build_request(
            "POST", stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
            json={"model": "strata-fast", "messages": long_messages, "max_tokens": 4, "stream": True},
        )
        response = http.send(request, stream=True)
        assert response.status_code == 200
        deadline = time.monotonic() + 120
        while not (busy := busy_slots()):
            assert time.monotonic() < deadline, "the request never reached a slot"
            time.sleep(0.05)
        response.close()
    deadline = time.monotonic() + 120
    while (record := latest_record(stack))["status"] == "running" or busy_slots():
        assert time.monotonic() < deadline, "the request was never stopped"
        time.sleep(0.05)
    assert record["status"] == "disconnected" and record["finished"]
    assert busy_slots() == []
    slot = httpx.get(stack.lane_url("fast") + "/slots", headers=lane_headers).json()["slots"][busy[0]["slot"]]
    assert slot["cached_tokens"] < prompt_tokens(long_messages)  # cancelled mid-prefill, not run to the end
