"""Every error the lane answers, in the shape of the endpoint's dialect, as the official SDKs read it."""

import anthropic
import httpx
import openai
import pytest

from lanes.dialects.errors import ApiError
from lanes.engine_client import ENGINE_LOADING, QUEUE_FULL

USER = [{"role": "user", "content": "hi"}]
OPENAI_BODY = {"model": "m", "messages": USER}
ANTHROPIC_BODY = {"model": "m", "max_tokens": 20, "messages": USER}
ENDPOINTS = {
    "openai": ("/v1/chat/completions", OPENAI_BODY),
    "anthropic": ("/v1/messages", ANTHROPIC_BODY),
    "openai-count": ("/v1/chat/completions/count_tokens", OPENAI_BODY),
    "anthropic-count": ("/v1/messages/count_tokens", {"model": "m", "messages": USER}),
}


def error_of(response: httpx.Response, dialect: str) -> dict:
    """The error object, after checking the body is exactly the dialect's envelope."""
    body = response.json()
    if dialect.startswith("anthropic"):
        assert set(body) == {"type", "error"} and body["type"] == "error"
        assert {"type", "message"} <= set(body["error"])
    else:
        assert set(body) == {"error"}
        assert {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_malformed_json_is_400(fake_lane, endpoint):
    path, _ = ENDPOINTS[endpoint]
    r = httpx.post(fake_lane.url + path, content=b'{"messages": [', headers=fake_lane.headers)
    assert r.status_code == 400
    error = error_of(r, endpoint)
    assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_invalid_body_is_400(fake_lane, endpoint):
    path, body = ENDPOINTS[endpoint]
    r = fake_lane.post(path, {**body, "messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and error_of(r, endpoint)["type"] == "invalid_request_error"


@pytest.mark.parametrize("endpoint", ["openai", "anthropic"])
def test_prompt_too_long_carries_the_numbers(fake_lane, endpoint):
    """400 with the message and machine-readable prompt_tokens, max_context, max_output_tokens."""
    fake_lane.runtime.max_context = 64
    path, body = ENDPOINTS[endpoint]
    r = fake_lane.post(path, {**body, "messages": [{"role": "user", "content": "word " * 100}]})
    counted = fake_lane.post(ENDPOINTS[endpoint + "-count"][0], {**body, "messages": [{"role": "user", "content": "word " * 100}]})
    n = counted.json()["input_tokens"]
    assert r.status_code == 400
    error = error_of(r, endpoint)
    assert error["message"] == f"prompt is too long: {n} tokens > {64 - 16 - 1} maximum"
    assert (error["prompt_tokens"], error["max_context"], error["max_output_tokens"]) == (n, 64, 0)
    assert error["type"] == "invalid_request_error"
    assert fake_lane.runtime.engine.requests == []  # never reached the engine


@pytest.mark.parametrize("endpoint", ["openai", "anthropic"])
def test_output_too_long_without_fit_is_400_with_the_room(fake_lane, endpoint):
    fake_lane.runtime.max_context, fake_lane.runtime.fit_max_tokens = 256, False
    path, body = ENDPOINTS[endpoint]
    count = fake_lane.post(ENDPOINTS[endpoint + "-count"][0], body).json()["input_tokens"]
    r = fake_lane.post(path, {**body, "max_tokens": 1000})
    assert r.status_code == 400
    error = error_of(r, endpoint)
    assert (error["prompt_tokens"], error["max_context"], error["max_output_tokens"]) == (count, 256, 256 - 16 - count)


def test_output_too_long_with_fit_is_clamped(fake_lane):
    fake_lane.runtime.max_context = 256
    count = fake_lane.post("/v1/messages/count_tokens", {"model": "m", "messages": USER}).json()["input_tokens"]
    assert fake_lane.post("/v1/messages", {**ANTHROPIC_BODY, "max_tokens": 1000}).status_code == 200
    assert fake_lane.runtime.engine.requests[-1]["max_tokens"] == 256 - 16 - count


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_wrong_lane_key_is_401_in_the_endpoints_dialect(fake_lane, endpoint):
    path, body = ENDPOINTS[endpoint]
    r = httpx.post(fake_lane.url + path, json=body, headers={"x-api-key": "wrong"})
    assert r.status_code == 401
    error = error_of(r, endpoint)
    assert error["type"] == "authentication_error" and error["code"] == "NOT_LOGGED_IN"


def test_sdks_see_authentication_errors(fake_lane):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=fake_lane.url + "/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model="m", messages=USER)
    with pytest.raises(anthropic.AuthenticationError) as info:
        anthropic.Anthropic(base_url=fake_lane.url, api_key="wrong", max_retries=0).messages.create(
            model="m", max_tokens=5, messages=USER)
    assert info.value.body["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("path, headers, dialect", [
    ("/v1/nothing", {}, "openai"),
    ("/v1/messages/batches", {}, "anthropic"),
    ("/v1/nothing", {"anthropic-version": "2023-06-01"}, "anthropic"),
])
def test_unknown_route_is_404(fake_lane, path, headers, dialect):
    r = httpx.post(fake_lane.url + path, json={}, headers={**fake_lane.headers, **headers})
    assert r.status_code == 404 and error_of(r, dialect)["type"] == "not_found_error"


@pytest.mark.parametrize("status, message, openai_error, anthropic_error", [
    (409, QUEUE_FULL, openai.ConflictError, anthropic.ConflictError),
    (503, ENGINE_LOADING, openai.InternalServerError, anthropic.InternalServerError),
])
def test_queue_full_and_loading(fake_lane, status, message, openai_error, anthropic_error):
    """The supervisor's admission errors reach both SDKs as overloaded_error with the status."""
    fake_lane.runtime.engine.refuse = ApiError(status, message)
    with pytest.raises(openai_error) as oa:
        fake_lane.openai().chat.completions.create(model="m", messages=USER)
    with pytest.raises(anthropic_error) as an:
        fake_lane.anthropic().messages.create(model="m", max_tokens=5, messages=USER)
    assert oa.value.status_code == an.value.status_code == status
    assert oa.value.body["type"] == "overloaded_error" and oa.value.body["message"] == message
    assert an.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": message}}
    # Counting needs no engine: it still answers.
    assert fake_lane.post("/v1/messages/count_tokens", {"model": "m", "messages": USER}).status_code == 200


@pytest.mark.parametrize("endpoint", ["openai", "anthropic"])
def test_body_too_large_is_413(fake_lane, endpoint):
    path, body = ENDPOINTS[endpoint]
    fake_lane.runtime.max_body_bytes = 1000
    try:
        r = fake_lane.post(path, {**body, "messages": [{"role": "user", "content": "x" * 2000}]})
    finally:
        fake_lane.runtime.max_body_bytes = 64 << 20
    assert r.status_code == 413
    assert error_of(r, endpoint)["type"] == "request_too_large"


@pytest.mark.parametrize("endpoint", ["openai", "anthropic"])
def test_unexpected_failure_is_500_without_a_traceback(fake_lane, endpoint):
    fake_lane.runtime.engine.refuse = RuntimeError("boom")
    path, body = ENDPOINTS[endpoint]
    r = fake_lane.post(path, body)
    assert r.status_code == 500
    error = error_of(r, endpoint)
    assert error["type"] == "api_error" and "boom" not in r.text and "Traceback" not in r.text
