"""The whole pipeline over HTTP: the official SDKs -> the real gateway (daphne) -> lanes.

The real lanes (`strata`, `strata-fast`: llama.cpp on SmolLM2) answer with small max_tokens;
the scripted lane (`strata-fake`, see conftest) shows what the model would have been
given, and answers 400 where the output does not fit (fit_max_tokens off).
"""

import base64
import re
import threading
import time

import anthropic
import httpx
import openai
import pytest

import docfiles
from fakelane import Script

pytestmark = pytest.mark.e2e
USER = [{"role": "user", "content": "Name a colour."}]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def oa(stack, api_key):
    return openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=api_key, max_retries=0)


@pytest.fixture
def an(stack, api_key):
    return anthropic.Anthropic(base_url=stack.gateway_url, api_key=api_key, max_retries=0)


def prompt_of(fake, index: int = -1) -> str:
    """The prompt text the scripted engine was given."""
    return fake.runtime.tokenizer.decode(fake.engine.requests[index]["prompt"])


def lane_count(fake, path: str, body: dict) -> int:
    response = httpx.post(fake.url + path, json=body, headers={"authorization": f"Bearer {fake.key}"}, timeout=60)
    return response.json()["input_tokens"]


# -- both SDKs on the real model -----------------------------------------------------------------


def test_anthropic_sdk_on_the_real_model_with_usage_recorded(an, archive):
    """messages.create and messages.stream through the gateway; the row's tokens are the lane's usage."""
    row_of = archive.next_row("strata")
    message = an.messages.create(model="strata", max_tokens=6, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text.strip()
    row = row_of()
    assert (row["status"], row["dialect"], row["lane"]) == ("ok", "anthropic", "normal")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (message.usage.input_tokens, message.usage.output_tokens)
    row_of = archive.next_row("strata-fast")
    with an.messages.stream(model="strata-fast", max_tokens=5, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip()
    row = row_of()
    assert (row["stream"], row["lane"], row["status"]) == (1, "fast", "ok")
    assert row["completion_tokens"] == final.usage.output_tokens and row["ttft_ms"] > 0


def test_openai_sdk_streams_on_the_real_model(oa, archive):
    """The OpenAI SDK streams through the gateway; the row's completion tokens are the stream's usage."""
    row_of = archive.next_row("strata-fast")
    chunks = list(oa.chat.completions.create(model="strata-fast", messages=USER, max_tokens=5, stream=True,
                                             stream_options={"include_usage": True}, temperature=0))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert row_of()["completion_tokens"] == chunks[-1].usage.completion_tokens


def test_models_in_both_sdks(oa, an, fake):
    """/v1/models lists the enabled routes to both SDKs' models.list()."""
    assert {"strata", "strata-fast", "strata-fake"} <= {m.id for m in oa.models.list()}
    assert {"strata", "strata-fake"} <= {m.id for m in an.models.list()}


# -- auth -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["not-a-strata-key", "sk-strata-wrong"])  # (no key at all: the next test)
def test_sdks_without_a_valid_key_get_401_not_logged_in(stack, key):
    """OpenAI's and Anthropic's SDKs both see AuthenticationError carrying NOT_LOGGED_IN in their own shape."""
    with pytest.raises(openai.AuthenticationError) as info:
        openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0).chat.completions.create(
            model="strata", messages=USER, max_tokens=1)
    assert info.value.code == "NOT_LOGGED_IN"
    with pytest.raises(anthropic.AuthenticationError) as info:
        anthropic.Anthropic(base_url=stack.gateway_url, api_key=key, max_retries=0).messages.create(
            model="strata", messages=USER, max_tokens=1)
    assert info.value.body["type"] == "error" and info.value.body["error"]["code"] == "NOT_LOGGED_IN"
    assert info.value.body["error"]["type"] == "authentication_error"


def test_no_key_at_all_on_the_anthropic_endpoints_is_anthropic_shaped(stack):
    """No key, no session on /v1/messages*: 401 NOT_LOGGED_IN in Anthropic's error shape."""
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = httpx.post(stack.gateway_url + path, json={"model": "strata", "messages": USER, "max_tokens": 1})
        assert r.status_code == 401
        assert r.json() == {"type": "error", "error": {"type": "authentication_error", "code": "NOT_LOGGED_IN",
                                                       "message": r.json()["error"]["message"]}}


def test_revoked_key_is_refused_by_both_dialects(stack, fake):
    """A key that worked is refused by both endpoints right after `api_keys revoke`, cache or not."""
    key = stack.create_key("revoke-me")
    client = anthropic.Anthropic(base_url=stack.gateway_url, api_key=key, max_retries=0)
    assert client.messages.create(model="strata-fake", messages=USER, max_tokens=3).content
    stack.manage("api_keys", "revoke", "revoke-me")
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="strata-fake", messages=USER, max_tokens=3)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0).chat.completions.create(
            model="strata-fake", messages=USER, max_tokens=3)


def test_last_used_is_kept(stack, fake, archive):
    """A key's last_used is written (off the request path) once it is used."""
    key = stack.create_key("used-once")
    httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
               json={"model": "strata-fake", "messages": USER, "max_tokens": 2}, timeout=60)
    deadline = time.monotonic() + 30
    while not archive.query("SELECT last_used FROM gateway_apikey WHERE name = 'used-once'")[0]["last_used"]:
        assert time.monotonic() < deadline, "last_used was never written"
        time.sleep(0.05)


def form_token(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def login(stack, path: str, username: str, password: str) -> httpx.Client:
    http = httpx.Client(base_url=stack.gateway_url, timeout=60)
    page = http.get(path)
    assert page.status_code == 200
    response = http.post(path, data={"username": username, "password": password, "csrfmiddlewaretoken": form_token(page.text),
                                     "next": "/"})
    assert response.status_code == 302, response.text[:500]
    assert "sessionid" in http.cookies
    return http


@pytest.fixture(scope="module")
def users(stack):
    stack.django(
        "from django.contrib.auth.models import User\n"
        "User.objects.filter(username__in=['alice', 'root']).delete()\n"
        "User.objects.create_user('alice', password='alice-pass-123')\n"
        "User.objects.create_superuser('root', password='root-pass-123')\nprint(1)")


def test_browser_session_via_the_login_page_with_csrf(stack, fake, users):
    """Log in on /login/ (Django's form and CSRF), then call the API with the session cookie: with the
    csrftoken in X-CSRFToken it is served; without it, it is refused (another site could post otherwise)."""
    http = login(stack, "/login/", "alice", "alice-pass-123")
    assert http.get("/", headers={"accept": "text/html"}).status_code == 200
    assert http.get("/v1/models").status_code == 200
    body = {"model": "strata-fake", "messages": USER, "max_tokens": 3}
    refused = http.post("/v1/chat/completions", json=body)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "CSRF_FAILED"
    served = http.post("/v1/chat/completions", json=body, headers={"x-csrftoken": http.cookies["csrftoken"]})
    assert served.status_code == 200 and served.json()["choices"][0]["message"]["content"]
    bad_login = httpx.Client(base_url=stack.gateway_url)
    page = bad_login.get("/login/")
    again = bad_login.post("/login/", data={"username": "alice", "password": "wrong", "csrfmiddlewaretoken": form_token(page.text)})
    assert again.status_code == 200 and "did not match" in again.text
    assert bad_login.post("/v1/chat/completions", json=body).status_code == 401


def test_route_changed_in_admin_takes_effect_on_the_next_request(stack, fake, users, archive, api_key):
    """Over HTTP through the gateway: a staff user edits a route in Django admin's change form; the very
    next request follows it, though routes are cached (the save's signal clears the cache)."""
    stack.django("from gateway.models import ModelRoute\nfrom lanes.models import Lane\n"
                 "ModelRoute.objects.update_or_create(model_name='admin-routed', defaults=dict(lane=Lane.objects.get(name='fast')))\n"
                 "print(1)")
    headers = {"authorization": f"Bearer {api_key}"}
    body = {"model": "admin-routed", "messages": USER, "max_tokens": 1}
    row_of = archive.next_row("admin-routed")
    assert httpx.post(stack.gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=60).status_code == 200
    assert row_of()["lane"] == "fast"

    route_id = archive.query("SELECT id FROM gateway_modelroute WHERE model_name = 'admin-routed'")[0]["id"]
    fake_id = archive.query("SELECT id FROM lanes_lane WHERE name = 'fakelane'")[0]["id"]
    admin = login(stack, "/admin/login/?next=/admin/", "root", "root-pass-123")
    change = f"/admin/gateway/modelroute/{route_id}/change/"
    page = admin.get(change)
    assert page.status_code == 200
    saved = admin.post(change, data={"csrfmiddlewaretoken": form_token(page.text), "model_name": "admin-routed",
                                     "lane": str(fake_id), "upstream_url": "", "upstream_key": "", "enabled": "on",
                                     "_save": "Save"})
    assert saved.status_code == 302, saved.text[:2000]

    row_of = archive.next_row("admin-routed")
    assert httpx.post(stack.gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=60).status_code == 200
    assert len(fake.engine.requests) == 1  # the scripted lane got it
    assert row_of()["lane"] == "fakelane"


# -- documents --------------------------------------------------------------------------------------

DOCS = {
    "pdf": ("application/pdf", "paper.pdf", lambda: docfiles.pdf(["The zebra census counted 412 animals."]),
            "The zebra census counted 412 animals."),
    "scanned-pdf": ("application/pdf", "scan.pdf", lambda: docfiles.pdf([docfiles.bitmap("SCAN 42")]),
                    "page 1 is a scanned page"),
    "docx": ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", "memo.docx",
             lambda: docfiles.docx(["The meeting moved to Thursday."], [["owner", "task"], ["Ada", "slides"]]),
             "The meeting moved to Thursday.\n| owner | task |\n| Ada | slides |"),
    "xlsx": ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "budget.xlsx",
             lambda: docfiles.xlsx({"Q1": [["item", "eur"], ["tea", 12]], "Q2": [["coffee", 30]]}),
             "## Sheet: Q1\nitem,eur\ntea,12\n## Sheet: Q2\ncoffee,30"),
    "csv": ("text/csv", "cities.csv", lambda: b"city,population\nLyon,522000\n", "city,population\nLyon,522000"),
    "text": ("text/plain", "notes.txt", lambda: "Remember the milk. Ünïcode ok.".encode(), "Remember the milk. Ünïcode ok."),
}


@pytest.mark.parametrize("kind", list(DOCS))
def test_each_document_type_reaches_the_model_as_text_anthropic(kind, an, fake):
    """An Anthropic document block (base64) of each type: the model's prompt holds its extracted text."""
    media_type, name, build, expected = DOCS[kind]
    an.messages.create(model="strata-fake", max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "document", "title": name, "source": {"type": "base64", "media_type": media_type, "data": b64(build())}},
        {"type": "text", "text": "What does it say?"}]}])
    prompt = prompt_of(fake)
    assert f"[document: {name}" in prompt and expected in prompt and "What does it say?" in prompt


@pytest.mark.parametrize("kind", ["pdf", "docx", "xlsx", "csv"])
def test_each_document_type_reaches_the_model_as_text_openai(kind, oa, fake):
    """An OpenAI `file` part with a data URL: the same extracted text reaches the model."""
    media_type, name, build, expected = DOCS[kind]
    oa.chat.completions.create(model="strata-fake", max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Read this."},
        {"type": "file", "file": {"filename": name, "file_data": f"data:{media_type};base64,{b64(build())}"}}]}])
    assert expected in prompt_of(fake)


def test_corrupt_document_is_a_400_naming_the_part(an, fake, archive):
    """A damaged PDF is a 400 naming messages[0].content[1], recorded; the engine never sees it."""
    row_of = archive.next_row("strata-fake")
    with pytest.raises(anthropic.BadRequestError) as info:
        an.messages.create(model="strata-fake", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "document", "title": "broken.pdf",
             "source": {"type": "base64", "media_type": "application/pdf", "data": b64(b"%PDF-1.5 truncated")}}]}])
    message = info.value.body["error"]["message"]
    assert message.startswith("messages[0].content[1] (document 'broken.pdf')") and "PDF" in message
    assert fake.engine.requests == []
    assert row_of()["http_status"] == 400


def test_count_tokens_passes_the_documents_gate(an, fake):
    """count_tokens of a message with a PDF counts the extracted text (the lane alone would refuse base64)."""
    pdf = docfiles.pdf(["A document about lighthouses and the keepers who lived in them, year after year."])
    plain = an.messages.count_tokens(model="strata-fake", messages=USER).input_tokens
    with_doc = an.messages.count_tokens(model="strata-fake", messages=[{"role": "user", "content": [
        {"type": "document", "title": "l.pdf", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf)}},
        {"type": "text", "text": "Name a colour."}]}]).input_tokens
    assert with_doc - plain >= 15
    assert fake.engine.requests == []  # counting never reaches the engine


# -- the window pre-check, the thinking guard and the rewrite net -------------------------------------

LONG = "the keeper climbed the stairs and lit the lamp " * 1100  # ~53K chars, ~11K tokens: over an 8K window
MEDIUM = "hello world " * 1000  # 12K chars: the estimate (8400) says it may not fit; it counts ~2000


def test_precheck_pass_through_costs_no_count(stack, api_key, fake):
    """A small prompt passes the pre-check on the estimate alone: no count call (Server-Timing has none)."""
    response = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                          json={"model": "strata-fake", "messages": USER, "max_tokens": 5}, timeout=60)
    assert response.status_code == 200
    timing = response.headers["server-timing"]
    assert "gateway;dur=" in timing and "count;" not in timing  # answered without asking the lane to count
    assert fake.engine.requests[-1]["max_tokens"] == 5


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_precheck_rejects_a_long_prompt_at_once_with_the_exact_count(dialect, oa, an, fake, archive):
    """est says it may not fit, the lane counts N > 8175: a 400 with N, and the engine never sees it."""
    messages = [{"role": "user", "content": LONG}]
    row_of = archive.next_row("strata-fake")
    if dialect == "openai":
        counted = lane_count(fake, "/v1/chat/completions/count_tokens", {"messages": messages})
        with pytest.raises(openai.BadRequestError) as info:
            oa.chat.completions.create(model="strata-fake", messages=messages, max_tokens=10)
        error = info.value.body
    else:
        counted = lane_count(fake, "/v1/messages/count_tokens", {"messages": messages})
        with pytest.raises(anthropic.BadRequestError) as info:
            an.messages.create(model="strata-fake", messages=messages, max_tokens=10)
        error = info.value.body["error"]
    assert counted > 8175
    assert error["message"] == f"prompt is too long: {counted} tokens > 8175 maximum"
    assert (error["prompt_tokens"], error["max_context"], error["max_output_tokens"]) == (counted, 8192, 0)
    assert fake.engine.requests == []
    row = row_of()
    assert (row["status"], row["http_status"], row["prompt_tokens"]) == ("rejected", 400, counted)


def test_precheck_clamps_max_tokens_when_only_the_output_does_not_fit(stack, api_key, fake):
    """The prompt fits, max_tokens does not: clamped to the room (this lane would answer 400 otherwise)."""
    messages = [{"role": "user", "content": MEDIUM}]
    counted = lane_count(fake, "/v1/chat/completions/count_tokens", {"messages": messages})
    response = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                          json={"model": "strata-fake", "messages": messages, "max_tokens": 8000}, timeout=60)
    assert response.status_code == 200, response.text
    assert "count;dur=" in response.headers["server-timing"]
    assert fake.engine.requests[-1]["max_tokens"] == 8192 - 16 - counted


def test_rewrite_net_retries_once_with_the_lanes_room(stack, api_key, fake, archive):
    """A prompt small enough to skip counting, max_tokens beyond the window: the lane says 400 with its room,
    the gateway retries once clamped; the client sees only the 200."""
    counted = lane_count(fake, "/v1/chat/completions/count_tokens", {"messages": USER})
    row_of = archive.next_row("strata-fake")
    response = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
                          json={"model": "strata-fake", "messages": USER, "max_tokens": 9000}, timeout=60)
    assert response.status_code == 200, response.text
    room = 8192 - 16 - counted
    assert [r["max_tokens"] for r in fake.engine.requests] == [room]
    assert fake.engine.requests[0]["reasoning"]["budget"] == room - 4096  # the guard's budget followed the clamp
    assert row_of()["status"] == "ok"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_rewrite_net_turns_the_lanes_prompt_too_long_into_the_structured_error(dialect, oa, an, wide):
    """The gateway believes the window is 100000 (no count), the lane knows it is 8192: its 400 reaches the
    client as the dialect's structured error with the lane's measured numbers."""
    messages = [{"role": "user", "content": LONG}]
    if dialect == "openai":
        with pytest.raises(openai.BadRequestError) as info:
            oa.chat.completions.create(model="strata-wide", messages=messages, max_tokens=10)
        error = info.value.body
    else:
        with pytest.raises(anthropic.BadRequestError) as info:
            an.messages.create(model="strata-wide", messages=messages, max_tokens=10)
        error = info.value.body["error"]
        assert info.value.body["type"] == "error" and error["type"] == "invalid_request_error"
    counted = lane_count(wide, "/v1/chat/completions/count_tokens", {"messages": messages})
    assert error["message"] == f"prompt is too long: {counted} tokens > 8175 maximum"
    assert (error["prompt_tokens"], error["max_context"], error["max_output_tokens"]) == (counted, 8192, 0)
    assert wide.engine.requests == []


def test_thinking_guard_sends_the_answer_reserve_only_without_a_preference(an, oa, fake):
    """The guard's budget (max_tokens - 4096) reaches the engine only when the client states no thinking preference."""
    an.messages.create(model="strata-fake", max_tokens=7000, messages=USER)
    assert fake.engine.requests[-1]["reasoning"]["budget"] == 7000 - 4096
    an.messages.create(model="strata-fake", max_tokens=7000, messages=USER,
                       thinking={"type": "enabled", "budget_tokens": 5000})
    assert fake.engine.requests[-1]["reasoning"]["budget"] == 5000
    oa.chat.completions.create(model="strata-fake", max_tokens=7000, messages=USER, reasoning_effort="low")
    assert fake.engine.requests[-1]["reasoning"]["budget"] == 1024  # the lane's budget for "low", not the guard's
    oa.chat.completions.create(model="strata-fake", max_tokens=100, messages=USER)
    assert "reasoning" not in fake.engine.requests[-1]  # 100 - 4096 <= 0: no budget sent


# -- live registry: /concurrency, disconnects, /metrics -------------------------------------------------


def test_concurrency_shows_a_request_while_it_streams_and_a_disconnect_is_recorded(stack, api_key, fake, archive):
    """While a stream runs, /concurrency lists it (model, lane, key, state, live tokens) beside the lane's
    slots; closing the client then cancels the lane's generation and the row says disconnected."""
    fake.engine.script(Script(text="one two three four five six seven eight nine ten " * 5, per_token_s=0.2))
    headers = {"authorization": f"Bearer {api_key}"}
    row_of = archive.next_row("strata-fake")
    with httpx.Client(timeout=60) as http:
        response = http.send(http.build_request(
            "POST", stack.gateway_url + "/v1/chat/completions", headers=headers,
            json={"model": "strata-fake", "messages": USER, "max_tokens": 50, "stream": True}), stream=True)
        assert response.status_code == 200
        lines = response.iter_lines()
        deadline = time.monotonic() + 30
        while True:
            report = http.get(stack.gateway_url + "/concurrency", headers=headers).json()
            mine = [e for e in report["in_flight"] if e["model"] == "strata-fake"]
            if mine and mine[0]["state"] == "streaming" and mine[0]["completion_tokens"] >= 2:
                break
            assert time.monotonic() < deadline, f"never seen streaming: {report}"
            next(lines)
        entry = mine[0]
        assert (entry["lane"], entry["route"], entry["key"], entry["stream"]) == ("fakelane", "strata-fake", "pytest", True)
        assert entry["age_s"] > 0 and set(entry) >= {"id", "model", "lane", "key", "state", "age_s", "completion_tokens"}
        lane = report["lanes"]["fakelane"]
        assert entry["id"] in lane["in_flight"] and [s["state"] for s in lane["slots"]] == ["generating"]
        response.close()
    row = row_of()
    assert row["status"] == "disconnected" and row["id"].replace("-", "") == entry["id"].replace("-", "")
    stream = fake.engine.streams[-1]
    deadline = time.monotonic() + 30
    while not stream.cancelled:
        assert time.monotonic() < deadline, "the lane kept generating"
        time.sleep(0.05)
    assert stream.sent < 50


def test_metrics_count_requests_and_tokens(stack, api_key, fake):
    """/metrics (behind auth) counts requests by outcome, tokens and TTFT per lane."""
    httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"authorization": f"Bearer {api_key}"},
               json={"model": "strata-fake", "messages": USER, "max_tokens": 3}, timeout=60)
    text = httpx.get(stack.gateway_url + "/metrics", headers={"authorization": f"Bearer {api_key}"}).text
    assert re.search(r'strata_requests_total\{code="200",dialect="openai",lane="fakelane",status="ok"\} [1-9]', text)
    assert re.search(r'strata_tokens_total\{kind="completion",lane="fakelane"\} [1-9]', text)
    assert 'strata_ttft_seconds_bucket{lane="fakelane",le="+Inf"}' in text
    assert httpx.get(stack.gateway_url + "/metrics").status_code == 401


def test_a_slow_request_does_not_hold_up_the_others(stack, api_key, fake):
    """The gateway does no concurrency limiting: a held request and a quick one run side by side."""
    release = threading.Event()
    fake.engine.script(Script(text="held", hold=release), Script(text="quick"))
    headers = {"authorization": f"Bearer {api_key}"}
    result = {}

    def slow():
        result["slow"] = httpx.post(stack.gateway_url + "/v1/chat/completions", headers=headers, timeout=60,
                                    json={"model": "strata-fake", "messages": USER, "max_tokens": 3})

    thread = threading.Thread(target=slow)
    thread.start()
    deadline = time.monotonic() + 30
    while len(fake.engine.requests) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    quick = httpx.post(stack.gateway_url + "/v1/chat/completions", headers=headers, timeout=60,
                       json={"model": "strata-fake", "messages": USER, "max_tokens": 3})
    assert quick.status_code == 200 and quick.json()["choices"][0]["message"]["content"] == "quick"
    assert thread.is_alive()
    release.set()
    thread.join(30)
    assert result["slow"].json()["choices"][0]["message"]["content"] == "held"


def test_a_route_to_an_upstream_url_with_its_own_key(stack, oa, an, fake):
    """A route may name any OpenAI/Anthropic-compatible base URL and key instead of a lane: the gateway sends
    that key (never the client's), adds no lane-only field (no reasoning budget), and streams the answer."""
    stack.django("from gateway.models import ModelRoute\n"
                 f"ModelRoute.objects.update_or_create(model_name='strata-upstream', defaults=dict(lane=None, "
                 f"upstream_url='{fake.url}/v1', upstream_key='{fake.key}'))\nprint(1)")
    reply = oa.chat.completions.create(model="strata-upstream", messages=USER, max_tokens=7000)
    assert reply.choices[0].message.content
    assert "reasoning" not in fake.engine.requests[-1]  # the thinking guard is for our lanes only
    with an.messages.stream(model="strata-upstream", max_tokens=5, messages=USER) as stream:
        assert "".join(stream.text_stream)
    assert len(fake.engine.requests) == 2
