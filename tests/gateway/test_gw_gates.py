"""Each gate alone, in this process: no gateway server, the lane's count replaced where a gate asks for it."""

import base64
import json
import shutil
from types import SimpleNamespace

import pytest

import docfiles
from gateway import documents as docs
from gateway.gates import documents, precheck, rewrite, thinking
from gateway.state import RequestState
from gateway.tee import Tee
from lanes.dialects.errors import ANTHROPIC, OPENAI, ApiError

LANE = SimpleNamespace(name="t", max_context=8192, slack=16, base_url="http://127.0.0.1:9", enabled=True)


def state_for(body: dict, dialect: str = OPENAI, lane=LANE, path: str | None = None) -> RequestState:
    raw = json.dumps(body).encode()
    path = path or ("/v1/messages" if dialect == ANTHROPIC else "/v1/chat/completions")
    state = RequestState(scope={"headers": []}, path=path, dialect=dialect, raw_body=raw)
    state.body, state.model, state.lane = json.loads(raw), body.get("model", ""), lane
    return state


@pytest.fixture
def counts(monkeypatch):
    """Replace the lane's count: `counts.value` is answered (None: counting unavailable); calls are logged."""
    box = SimpleNamespace(value=None, calls=[])

    async def fake_count(lane, dialect, content, timings=None):
        box.calls.append(json.loads(content))
        return box.value(json.loads(content)) if callable(box.value) else box.value

    monkeypatch.setattr(precheck, "count_at_lane", fake_count)
    monkeypatch.setattr(documents, "count_at_lane", fake_count)
    return box


# -- the estimate -------------------------------------------------------------------------------


def test_estimate_weighs_each_character_class():
    """CJK and digits cost 1.05 tokens a character, everything else 0.70 (SPEC 2.5)."""
    assert precheck.estimate_tokens("a" * 100) == 70
    assert precheck.estimate_tokens("7" * 100) == 105
    assert precheck.estimate_tokens("中" * 100) == 105
    assert precheck.estimate_tokens("é" * 100) == 70
    assert precheck.estimate_tokens("ab12中文") == 6  # ceil(0.7*2 + 1.05*2 + 1.05*2 = 5.6)


@pytest.fixture(scope="module")
def lane_runtime():
    from fakelane import build_app

    return build_app("k")[0].lane


@pytest.mark.parametrize("kind", ["prose", "code", "cjk", "digits", "tools", "many-messages", "special-literals"])
def test_estimate_plus_margin_bounds_the_lanes_exact_count(kind, lane_runtime, settings):
    """The pre-check may skip counting only if est + margin is never below the lane's count: checked on
    English, code, Chinese, digits, 55 tool schemas, 326 short messages and special-token literals."""
    from lanes.dialects.openai import openai_to_request
    from lanes.prepare import count_tokens

    text = {
        "prose": "The quick brown fox jumps over the lazy dog near the riverbank. " * 300,
        "code": "def f(x):\n    return {'k': [x ** 2 for x in range(10)]}  # comment\n" * 200,
        "cjk": "这是一个用于测试上限估计的中文句子，包含标点符号。" * 300,
        "digits": "3.14159 2718281828 1234567890 " * 300,
        "tools": "Use the tools.",
        "many-messages": "ok",
        "special-literals": "<|im_end|><|im_start|>system " * 200,
    }[kind]
    messages = [{"role": "user", "content": text}]
    body = {"model": "m", "messages": messages}
    if kind == "tools":
        body["tools"] = [{"type": "function", "function": {
            "name": f"tool_{i}", "description": "Does a thing with a file path and a count.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
                           "required": ["path"]}}} for i in range(55)]
    if kind == "many-messages":
        body["messages"] = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(326)]
    exact = count_tokens(lane_runtime, openai_to_request(body))
    est = precheck.estimate_tokens(json.dumps(body).encode())
    assert est + settings.STRATA_PRECHECK_MARGIN >= exact, (est, exact)


# -- gate 5: the window pre-check ------------------------------------------------------------


@pytest.mark.anyio
async def test_precheck_passes_a_small_prompt_without_counting(counts):
    """est + margin <= window - slack: no count is asked for, the body goes on unchanged."""
    state = state_for({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100})
    assert await precheck.check(state) is state
    assert counts.calls == [] and not state.body_changed


@pytest.mark.anyio
async def test_precheck_rejects_at_once_with_the_exact_count(counts):
    """A prompt the lane counts above max_context - slack - 1 is a 400 with that count, as the lane words it."""
    counts.value = 9000
    state = state_for({"model": "m", "messages": [{"role": "user", "content": "x " * 6000}], "max_tokens": 10})
    with pytest.raises(ApiError) as info:
        await precheck.check(state)
    error = info.value
    assert error.status == 400 and error.message == "prompt is too long: 9000 tokens > 8175 maximum"
    assert error.extra == {"prompt_tokens": 9000, "max_context": 8192, "max_output_tokens": 0}
    assert len(counts.calls) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_precheck_clamps_max_tokens_when_only_the_output_does_not_fit(counts, field):
    """The prompt fits but max_tokens does not: clamped to max_context - slack - counted, body rewritten."""
    counts.value = 8000
    state = state_for({"model": "m", "messages": [{"role": "user", "content": "y " * 6000}], field: 1000})
    await precheck.check(state)
    assert state.body[field] == 8192 - 16 - 8000 and state.body_changed
    assert json.loads(state.content())[field] == 176


@pytest.mark.anyio
async def test_precheck_clamps_an_anthropic_thinking_budget_with_max_tokens(counts):
    """Anthropic needs budget_tokens < max_tokens: a clamp below the budget shrinks the budget too."""
    counts.value = 8100
    state = state_for({"model": "m", "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1500},
                       "messages": [{"role": "user", "content": "z " * 6000}]}, dialect=ANTHROPIC)
    await precheck.check(state)
    assert state.body["max_tokens"] == 76 and state.body["thinking"]["budget_tokens"] == 75


@pytest.mark.anyio
async def test_precheck_passes_through_when_counting_is_unavailable(counts):
    """No count (lane down, an error): the request goes on unchanged; the lane's 400 and the net catch it."""
    counts.value = None
    state = state_for({"model": "m", "messages": [{"role": "user", "content": "w " * 7000}], "max_tokens": 5000})
    assert await precheck.check(state) is state
    assert len(counts.calls) == 1 and not state.body_changed


@pytest.mark.anyio
async def test_precheck_leaves_upstream_urls_and_count_requests_alone(counts):
    """No window is known for an upstream URL; count_tokens stops before the pre-check."""
    counts.value = 10**6
    big = {"model": "m", "messages": [{"role": "user", "content": "v " * 9000}]}
    await precheck.check(state_for(big, lane=None))
    await precheck.check(state_for(big, path="/v1/messages/count_tokens", dialect=ANTHROPIC))
    assert counts.calls == []


# -- gate 4: the thinking guard --------------------------------------------------------------


@pytest.mark.anyio
async def test_thinking_guard_keeps_the_answer_reserve(settings):
    """No preference: reasoning_budget_tokens = max_tokens - max(reserve, max_tokens/3)."""
    settings.STRATA_ANSWER_RESERVE_TOKENS = 4096
    state = await thinking.guard(state_for({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 7000}))
    assert state.body["reasoning_budget_tokens"] == 7000 - 4096 and state.body_changed
    state = await thinking.guard(state_for({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 30000}))
    assert state.body["reasoning_budget_tokens"] == 20000  # the reserve is a third of max_tokens here


@pytest.mark.anyio
@pytest.mark.parametrize("body, dialect", [
    ({"max_tokens": 9000, "reasoning_effort": "low"}, OPENAI),
    ({"max_tokens": 9000, "thinking": {"type": "disabled"}}, ANTHROPIC),
    ({"max_tokens": 9000, "thinking": {"type": "enabled", "budget_tokens": 2000}}, ANTHROPIC),
    ({"max_tokens": 4000}, OPENAI),  # budget would be <= 0
])
async def test_thinking_guard_stays_out_when_it_should(body, dialect):
    """A stated preference, or no room for a budget: the body is left as it is."""
    state = await thinking.guard(state_for({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body},
                                           dialect=dialect))
    assert "reasoning_budget_tokens" not in state.body and not state.body_changed


@pytest.mark.anyio
async def test_thinking_guard_is_not_sent_to_upstream_urls():
    """An upstream URL would reject the lane-only field: the guard adds nothing there."""
    state = await thinking.guard(state_for({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 9000}, lane=None))
    assert "reasoning_budget_tokens" not in state.body


@pytest.mark.anyio
async def test_thinking_budget_follows_a_clamped_max_tokens(counts):
    """After the pre-check clamps max_tokens, the guard's budget is recomputed (or dropped)."""
    state = state_for({"model": "m", "messages": [{"role": "user", "content": "q " * 6000}], "max_tokens": 8000})
    await thinking.guard(state)
    assert state.body["reasoning_budget_tokens"] == 8000 - 4096
    counts.value = 3000
    await precheck.check(state)
    assert state.body["max_tokens"] == 8192 - 16 - 3000
    assert state.body["reasoning_budget_tokens"] == 5176 - 4096
    counts.value = 7000
    state.body["max_tokens"] = 8000
    await precheck.check(state)
    assert state.body["max_tokens"] == 1176 and "reasoning_budget_tokens" not in state.body


# -- gate 7: the rewrite net ------------------------------------------------------------------


def lane_400(dialect: str, prompt: int, room: int) -> bytes:
    error = ApiError(400, "input length and `max_tokens` exceed context limit" if room else
                     f"prompt is too long: {prompt} tokens > 8175 maximum", code="context_length_exceeded",
                     extra={"prompt_tokens": prompt, "max_context": 8192, "max_output_tokens": room})
    return error.to_bytes(dialect)


@pytest.mark.parametrize("dialect", [OPENAI, ANTHROPIC])
def test_rewrite_net_retries_once_with_the_reported_room(dialect):
    """Output too long: max_tokens becomes the lane's reported room, and the answer is RETRY once only."""
    state = state_for({"model": "m", "messages": [], "max_tokens": 9000}, dialect=dialect)
    assert rewrite.examine(state, lane_400(dialect, 100, 8076), retried=False) == rewrite.RETRY
    assert state.body["max_tokens"] == 8076 and state.body_changed
    second = rewrite.examine(state, lane_400(dialect, 100, 8076), retried=True)
    assert isinstance(second, ApiError)  # never a second retry


@pytest.mark.parametrize("dialect", [OPENAI, ANTHROPIC])
def test_rewrite_net_answers_a_long_prompt_with_the_measured_numbers(dialect):
    """A lane's prompt-too-long 400 becomes the dialect's error with prompt_tokens, max_context, max_output_tokens."""
    state = state_for({"model": "m", "messages": [], "max_tokens": 10}, dialect=dialect)
    error = rewrite.examine(state, lane_400(dialect, 9999, 0), retried=False)
    assert isinstance(error, ApiError) and error.status == 400
    assert error.message == "prompt is too long: 9999 tokens > 8175 maximum"
    body = error.body(dialect)["error"]
    assert (body["prompt_tokens"], body["max_context"], body["max_output_tokens"]) == (9999, 8192, 0)


def test_rewrite_net_passes_other_400s_through():
    """A 400 that is not about the window is not the net's to rewrite."""
    state = state_for({"model": "m", "messages": []})
    assert rewrite.examine(state, ApiError(400, "bad role").to_bytes(OPENAI), retried=False) is None
    assert rewrite.examine(state, b"not json", retried=False) is None


# -- gate 6's tee ------------------------------------------------------------------------------


def test_tee_reads_anthropic_usage_from_message_start_and_message_delta():
    """An Anthropic stream without the lane's comment (an upstream URL): usage from its own events."""
    stream = (b'event: message_start\ndata: {"type": "message_start", "message": {"id": "m", "usage": '
              b'{"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 7}}}\n\n'
              b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": '
              b'{"type": "text_delta", "text": "Hi"}}\n\n'
              b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": '
              b'{"type": "text_delta", "text": "!"}}\n\n'
              b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
              b'"usage": {"output_tokens": 12}}\n\nevent: message_stop\ndata: {"type": "message_stop"}\n\n')
    for cut in range(1, len(stream), 7):
        entry = SimpleNamespace(completion_tokens=0)
        tee = Tee(streaming=True, entry=entry)
        tee.feed(stream[:cut])
        tee.feed(stream[cut:])
        assert entry.completion_tokens == 2  # live: the content chunks seen
        tee.close()
        assert (tee.prompt_tokens, tee.completion_tokens, tee.cached_tokens) == (25, 12, 7)
        assert entry.completion_tokens == 12  # exact once usage is known
        assert tee.body == stream


def test_tee_prefers_the_lanes_usage_comment():
    """The lane's `: strata-usage` line (engine's cached tokens included) wins over the dialect's events."""
    stream = (b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 25, '
              b'"output_tokens": 1, "cache_read_input_tokens": 0}}}\n\n'
              b'event: message_delta\ndata: {"type": "message_delta", "usage": {"output_tokens": 3}}\n\n'
              b': strata-usage {"prompt_tokens": 25, "completion_tokens": 3, "prompt_tokens_details": '
              b'{"cached_tokens": 20}}\n\n')
    tee = Tee(streaming=True)
    tee.feed(stream)
    tee.close()
    assert (tee.prompt_tokens, tee.completion_tokens, tee.cached_tokens) == (25, 3, 20)


def test_tee_reads_an_openai_usage_chunk():
    """An OpenAI stream's include_usage chunk gives the usage; content chunks are counted live."""
    stream = (b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": null}\n\n'
              b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}\n\ndata: [DONE]\n\n')
    tee = Tee(streaming=True)
    tee.feed(stream)
    tee.close()
    assert (tee.prompt_tokens, tee.completion_tokens, tee.content_chunks) == (9, 4, 1)


# -- gate 3: documents -----------------------------------------------------------------------


PDF_TEXT = ["Quarterly report: revenue grew by 12 percent.", "Appendix: the numbers by region."]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_pdf_pages_are_extracted_in_order():
    """Each PDF page's text, in order, under a page marker."""
    extracted = docs.extract(docfiles.pdf(PDF_TEXT), docs.PDF)
    assert extracted.pages == 2
    text = extracted.text
    assert text.index("--- page 1 ---") < text.index("revenue grew") < text.index("--- page 2 ---") < text.index("Appendix")


def test_scanned_page_without_ocr_gets_a_note(tmp_path):
    """No OCR installed: the page is named as unreadable instead of silently dropped."""
    extracted = docs.extract(docfiles.pdf([docfiles.bitmap("SCAN 42")]), docs.PDF,
                             docs.Options(images=False, ocr_command="no-such-ocr-program"))
    assert "page 1 is a scanned page with no text layer; it could not be read" in extracted.text
    assert extracted.images == []


def test_scanned_page_is_read_by_ocr_for_a_text_only_route():
    """With tesseract installed (`make test` installs tesseract-ocr), a page without a text layer is read by OCR."""
    assert shutil.which("tesseract"), "tesseract-ocr is missing: `make test` installs it"
    extracted = docs.extract(docfiles.pdf([docfiles.bitmap("SCAN 42")]), docs.PDF, docs.Options(images=False))
    assert "read by OCR" in extracted.text and "42" in extracted.text


def test_scanned_page_becomes_a_png_for_a_route_that_takes_images():
    """For a route that takes images, a scanned page is rendered (pypdfium2) to a real PNG."""
    extracted = docs.extract(docfiles.pdf(["text page", docfiles.bitmap("SCAN 42")]), docs.PDF,
                             docs.Options(images=True))
    assert [number for number, _ in extracted.images] == [2]
    png = extracted.images[0][1]
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IDAT" in png
    assert "page 2 is a scanned page with no text layer: it follows as an image" in extracted.text


def test_docx_paragraphs_and_tables():
    """DOCX: headings, paragraphs and table rows, in document order."""
    data = docfiles.docx(["First paragraph.", "Second paragraph."], [["Name", "Score"], ["Ada", "99"]], heading="Report")
    assert docs.detect(data) == docs.DOCX
    assert docs.extract(data, docs.DOCX).text == ("# Report\nFirst paragraph.\nSecond paragraph.\n| Name | Score |\n"
                                                   "| Ada | 99 |")


def test_every_xlsx_sheet_as_rows():
    """XLSX: every sheet, named, as CSV rows (empty rows dropped)."""
    data = docfiles.xlsx({"Costs": [["item", "eur"], ["tea", 3.5], [None, None]], "Staff": [["Ada", 36]]})
    assert docs.detect(data) == docs.XLSX
    assert docs.extract(data, docs.XLSX).text == "## Sheet: Costs\nitem,eur\ntea,3.5\n## Sheet: Staff\nAda,36"


def test_csv_as_rows_whatever_its_delimiter():
    """CSV with ; is sniffed and given back as comma rows."""
    assert docs.extract(b"city;pop\nLyon;522000\n", docs.detect(b"city;pop\nLyon;522000\n", "text/csv")).text == \
        "city,pop\nLyon,522000"


@pytest.mark.parametrize("data, fragment", [
    (docfiles.encrypted_pdf(), "encrypted"),
    (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", "could not be read as PDF"),
    (b"PK\x03\x04 not really a zip", "damaged ZIP"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "encrypted"),
])
def test_corrupt_and_encrypted_documents_raise_a_readable_error(data, fragment):
    """Encrypted and damaged files raise DocumentError with a message for the client, never a crash."""
    with pytest.raises(docs.DocumentError) as info:
        docs.extract(data, docs.detect(data, "application/pdf", "x.pdf"))
    assert fragment in str(info.value)


def test_cut_keeps_head_70_and_tail_30_around_a_marker():
    """A cut keeps the first 70% and the last 30% of the allowance around a marker saying how much went."""
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    out = documents.cut(text, 100, "doc.txt")
    head, marker, tail = out.partition("\n\n[... ")
    assert head == text[:70] and out.endswith(text[-30:])
    assert "900 characters of doc.txt were cut here" in out


@pytest.mark.anyio
async def test_documents_gate_replaces_anthropic_document_blocks(counts):
    """base64 PDF and text sources (also inside a tool_result) become text blocks with the extracted text."""
    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise these."},
        {"type": "document", "title": "report.pdf",
         "source": {"type": "base64", "media_type": "application/pdf", "data": b64(docfiles.pdf(PDF_TEXT))}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Plain notes here."}},
    ]}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "document", "title": "data.csv",
             "source": {"type": "base64", "media_type": "text/csv", "data": b64(b"a,b\n1,2\n")}}]}]}]}
    state = await documents.extract_documents(state_for(body, dialect=ANTHROPIC))
    blocks = state.body["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["text", "text", "text"]
    assert blocks[1]["text"].startswith("[document: report.pdf (PDF, 2 pages)]") and "revenue grew" in blocks[1]["text"]
    assert "Plain notes here." in blocks[2]["text"]
    inner = state.body["messages"][2]["content"][0]["content"][0]
    assert inner["type"] == "text" and "a,b\n1,2" in inner["text"]
    assert state.body_changed and b"revenue grew" in state.content()
    assert counts.calls == []  # small: it fits by the estimate, nothing counted


@pytest.mark.anyio
async def test_documents_gate_replaces_openai_file_parts():
    """An OpenAI file part (DOCX data URL) becomes a text part with its name and text."""
    data = docfiles.docx(["Minutes of the meeting."])
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Read:"},
        {"type": "file", "file": {"filename": "minutes.docx", "file_data":
                                  "data:application/vnd.openxmlformats-officedocument.wordprocessingml.document;base64,"
                                  + b64(data)}}]}]}
    state = await documents.extract_documents(state_for(body))
    part = state.body["messages"][0]["content"][1]
    assert part["type"] == "text" and "[document: minutes.docx (DOCX)]" in part["text"]
    assert "Minutes of the meeting." in part["text"]


@pytest.mark.anyio
async def test_documents_gate_sends_scanned_pages_as_images_to_an_upstream_url():
    """To an upstream URL, a scanned page travels as an image_url part after the text."""
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"filename": "scan.pdf", "file_data": "data:application/pdf;base64," +
                                  b64(docfiles.pdf([docfiles.bitmap("SCAN 42")]))}}]}]}
    state = await documents.extract_documents(state_for(body, lane=None))
    parts = state.body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


@pytest.mark.anyio
@pytest.mark.parametrize("dialect, part", [
    (ANTHROPIC, {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                "data": b64(b"%PDF-1.7 broken")}}),
    (OPENAI, {"type": "file", "file": {"filename": "x.pdf", "file_data": "data:application/pdf;base64,!!!"}}),
    (OPENAI, {"type": "file", "file": {"file_id": "file-123"}}),
])
async def test_documents_gate_unreadable_part_is_a_400_naming_it(dialect, part):
    """Bad base64, a broken PDF or a file_id: a 400 whose message starts with the part's place."""
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]}
    with pytest.raises(ApiError) as info:
        await documents.extract_documents(state_for(body, dialect=dialect))
    assert info.value.status == 400 and info.value.message.startswith("messages[0].content[1]")


@pytest.mark.anyio
async def test_documents_are_cut_to_the_window_by_the_lanes_count(counts, settings):
    """Too big for the window: each document keeps head 70% + tail 30% of what the exact count allows."""
    settings.STRATA_DOCUMENTS = {**settings.STRATA_DOCUMENTS, "answer_reserve_tokens": 1000}
    long_text = "".join(f"line {i:05d} of the long document\n" for i in range(4000))  # ~128K chars

    def count(body):  # 1 token per 4 characters, 10 tokens of overhead per prompt
        return 10 + len(json.dumps(body["messages"])) // 4

    counts.value = count
    body = {"model": "m", "max_tokens": 500, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise."},
        {"type": "document", "title": "long.txt", "source": {"type": "text", "media_type": "text/plain",
                                                              "data": long_text}}]}]}
    state = await documents.extract_documents(state_for(body, dialect=ANTHROPIC))
    text = state.body["messages"][0]["content"][1]["text"]
    assert "line 00000 of the long document" in text and "line 03999 of the long document" in text
    assert "were cut here to fit the context window" in text
    assert count({"messages": state.body["messages"]}) <= 8192 - 16 - 500  # it fits, answer room kept
    assert count({"messages": state.body["messages"]}) > (8192 - 16 - 500) * 0.8  # and little was wasted
