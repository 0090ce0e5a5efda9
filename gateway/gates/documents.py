"""Gate 3, documents: PDF, DOCX, XLSX, CSV and text parts become readable text the model is given.

Anthropic `document` blocks (base64 or text sources, in a user message or a tool_result)
and OpenAI `file` parts (`file_data` as a data URL) are replaced by a text block with the
extracted text, headed by the document's name; a scanned PDF page becomes an image block
after it where the route takes images (upstream URLs), else OCR text or a note (our lanes
are text-only). The text is cut to the window budget, head 70% + tail 30% around a
visible marker:
- a route to one of our lanes: the window (max_context - slack) less the answer reserve
  (min(max_tokens, STRATA_DOCUMENTS["answer_reserve_tokens"])), less the rest of the
  prompt; measured by the lane's exact count when the character-class estimate says the
  documents may not fit, by the estimate when the lane cannot count;
- an upstream URL (window unknown): STRATA_DOCUMENTS["max_chars"] per document.
A part that cannot be read is a 400 naming it (messages[i].content[j]), never a 500.
"""

import asyncio
import base64
import binascii
from dataclasses import dataclass

from django.conf import settings

from gateway import documents as docs
from gateway.state import RequestState, dumps
from lanes.dialects.errors import ANTHROPIC, bad_request

from .precheck import count_at_lane, estimate, estimate_tokens, lane_count

CUT_SAFETY = 0.97  # chars kept = what the measured tokens-per-char allows, less this margin
MARKER_TOKENS = 64  # what a cut marker costs, kept free per cut document


@dataclass
class Found:
    """One document part: where it is, what it holds, and the text block that replaces it."""

    where: str
    name: str
    data: bytes
    kind: str
    context: str = ""
    extracted: docs.Extracted | None = None
    block: dict | None = None  # the replacing text block (its text is cut in place)
    header: str = ""
    body: str = ""


def _maybe_has_documents(state: RequestState) -> bool:
    raw = state.raw_body
    return (b'"document"' in raw) if state.dialect == ANTHROPIC else (b'"file"' in raw)


def _decode_base64(data, where: str) -> bytes:
    if not isinstance(data, str):
        raise bad_request(f"{where}: the document's data must be a base64 string")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        try:
            return base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(f"{where}: the document's data is not valid base64")


def _anthropic_document(block: dict, where: str) -> Found | None:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    name = block.get("title") if isinstance(block.get("title"), str) else ""
    context = block.get("context") if isinstance(block.get("context"), str) else ""
    if kind == "base64":
        data = _decode_base64(source.get("data"), where)
        media_type = source.get("media_type") or ""
    elif kind == "text":
        if not isinstance(source.get("data"), str):
            raise bad_request(f"{where}.source.data must be a string")
        data, media_type = source["data"].encode("utf-8", "surrogatepass"), source.get("media_type") or "text/plain"
    else:
        return None  # content blocks are text already; url and file sources are the upstream's business
    return _found(where, name or "document", data, media_type, context)


def _openai_file(part: dict, where: str) -> Found:
    file = part.get("file")
    if not isinstance(file, dict):
        raise bad_request(f"{where}.file must be an object with file_data")
    name = file.get("filename") if isinstance(file.get("filename"), str) else "file"
    data = file.get("file_data")
    if not isinstance(data, str):
        if file.get("file_id"):
            raise bad_request(f"{where}: file_id references are not supported by this gateway; "
                              "send the file's content as file_data (a base64 data URL)")
        raise bad_request(f"{where}.file.file_data is required (a base64 data URL)")
    media_type = ""
    if data.startswith("data:"):
        head, _, data = data.partition(",")
        media_type = head[5:].split(";")[0]
    return _found(where, name, _decode_base64(data, where), media_type)


def _found(where: str, name: str, data: bytes, media_type: str, context: str = "") -> Found:
    limit = settings.STRATA_DOCUMENTS["max_bytes"]
    if len(data) > limit:
        raise bad_request(f"{where} (document {name!r}) is larger than {limit} bytes")
    try:
        kind = docs.detect(data, media_type, name)
    except docs.DocumentError as exc:
        raise bad_request(f"{where} (document {name!r}) {exc}")
    return Found(where, name, data, kind, context)


def _replace_in(blocks: list, where: str, anthropic: bool, found: list[Found]) -> list:
    """One content list with its document parts replaced by Found placeholders (the same list if none)."""
    out, replaced = [], False
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        doc = None
        if anthropic and kind == "document":
            doc = _anthropic_document(block, at)
        elif not anthropic and kind == "file":
            doc = _openai_file(block, at)
        elif anthropic and kind == "tool_result" and isinstance(block.get("content"), list):
            inner = _replace_in(block["content"], f"{at}.content", anthropic, found)
            if inner is not block["content"]:
                block, replaced = {**block, "content": inner}, True
        if doc is not None:
            found.append(doc)
            block, replaced = doc, True
        out.append(block)
    return out if replaced else blocks


def _blocks_for(doc: Found, anthropic: bool, images: bool) -> list[dict]:
    text_block = {"type": "text", "text": ""}
    doc.block = text_block
    result = [text_block]
    for number, png in doc.extracted.images if images else []:
        data = base64.b64encode(png).decode()
        if anthropic:
            result.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
        else:
            result.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}})
    return result


def _set_text(doc: Found, body: str, anthropic: bool):
    text = f"{doc.header}\n{body}\n[end of document {doc.name}]" if body else doc.header
    doc.block["text"] = text if anthropic else f"\n\n{text}\n\n"


def cut(text: str, keep: int, name: str, head_share: float = 0.7) -> str:
    """`text` cut to about `keep` characters: head 70%, a visible marker, tail 30%."""
    if len(text) <= keep:
        return text
    keep = max(keep, 0)
    head = int(keep * head_share)
    tail = keep - head
    omitted = len(text) - head - tail
    marker = (f"\n\n[... {omitted} characters of {name} were cut here to fit the context window; "
              f"the first {head} and the last {tail} are shown ...]\n\n")
    return text[:head] + marker + (text[-tail:] if tail else "")


async def extract_documents(state: RequestState) -> RequestState:
    if not _maybe_has_documents(state):
        return state
    body, anthropic = state.body, state.dialect == ANTHROPIC
    messages = body.get("messages")
    if not isinstance(messages, list):
        return state
    found: list[Found] = []
    new_messages = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            replaced = _replace_in(content, f"messages[{i}].content", anthropic, found)
            if replaced is not content:
                message = {**message, "content": replaced}
        new_messages.append(message)
    if not found:
        return state

    images = state.lane is None  # our lanes are text-only
    options = docs.Options(images=images, **{k: v for k, v in settings.STRATA_DOCUMENTS.items()
                                             if k in docs.Options.__dataclass_fields__})

    def run(doc: Found):
        try:
            return docs.extract(doc.data, doc.kind, options)
        except docs.DocumentError as exc:
            raise bad_request(f"{doc.where} (document {doc.name!r}) {exc}")

    results = await asyncio.gather(*(asyncio.to_thread(run, doc) for doc in found))
    for doc, extracted in zip(found, results):
        doc.extracted = extracted
        pages = f", {extracted.pages} page{'s' if extracted.pages != 1 else ''}" if extracted.pages else ""
        doc.header = f"[document: {doc.name} ({docs.LABELS[extracted.kind]}{pages})]"
        if doc.context:
            doc.header += f"\n[context: {doc.context}]"
        doc.body = extracted.text

    # Put the blocks in place of the placeholders, then cut the texts to the budget.
    def expand(blocks):
        out = []
        for block in blocks:
            if isinstance(block, Found):
                out.extend(_blocks_for(block, anthropic, images))
            elif isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                out.append({**block, "content": expand(block["content"])})
            else:
                out.append(block)
        return out

    body["messages"] = [
        {**m, "content": expand(m["content"])} if isinstance(m, dict) and isinstance(m.get("content"), list) else m
        for m in new_messages
    ]
    for doc in found:
        _set_text(doc, doc.body, anthropic)
    state.changed()
    await fit_to_budget(state, found, anthropic)
    state.extra["documents"] = [{"where": d.where, "name": d.name, "kind": d.kind, "chars": len(d.body)} for d in found]
    for doc in found:
        doc.data = b""  # free the decoded bytes early
    return state


async def fit_to_budget(state: RequestState, found: list[Found], anthropic: bool):
    config = settings.STRATA_DOCUMENTS
    head_share = config.get("head_share", 0.7)
    lane = state.lane
    if lane is None:
        for doc in found:
            if len(doc.body) > config["max_chars"]:
                _set_text(doc, cut(doc.body, config["max_chars"], doc.name, head_share), anthropic)
                state.changed()
        return
    max_tokens = state.max_tokens()
    reserve = min(max_tokens or config["answer_reserve_tokens"], config["answer_reserve_tokens"])
    available = lane.max_context - lane.slack - reserve - settings.STRATA_PRECHECK_MARGIN
    if estimate(state) <= available:
        return  # fits by the upper bound: nothing to measure or cut

    # The rest of the prompt, measured with every document reduced to its header.
    for doc in found:
        _set_text(doc, "", anthropic)
    state.changed()
    counts = await asyncio.gather(lane_count(state), _prompt_tokens(state, ""),
                                  *(_prompt_tokens(state, doc.body) for doc in found))
    rest, empty, doc_counts = counts[0], counts[1], counts[2:]
    if rest is None:
        rest = estimate(state)
    doc_tokens = [estimate_tokens(doc.body) if n is None or empty is None else max(n - empty, 1)
                  for doc, n in zip(found, doc_counts)]
    budget = available + settings.STRATA_PRECHECK_MARGIN - rest
    total = sum(doc_tokens)
    if total <= budget:
        for doc in found:
            _set_text(doc, doc.body, anthropic)
        state.changed()
        return
    budget = max(budget - MARKER_TOKENS * len(found), 0)
    for doc, tokens in zip(found, doc_tokens):
        share = budget * tokens / total if total else 0
        chars_per_token = len(doc.body) / tokens if tokens else 1.0
        keep = int(share * chars_per_token * CUT_SAFETY)
        _set_text(doc, cut(doc.body, keep, doc.name, head_share), anthropic)
    state.changed()


async def _prompt_tokens(state: RequestState, text: str) -> int | None:
    """The lane's count of a one-message prompt holding `text` (None when it cannot count)."""
    content = dumps({"model": state.model, "messages": [{"role": "user", "content": text}]})
    return await count_at_lane(state.lane, "openai", content, state.timings)
