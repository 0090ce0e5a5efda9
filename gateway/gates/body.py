"""Parse the JSON body once, for the gates after auth; malformed JSON is a 400."""

import json

from gateway.state import RequestState
from lanes.dialects.errors import bad_request


async def parse(state: RequestState) -> RequestState:
    try:
        body = json.loads(state.raw_body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    state.body = body
    state.model = body.get("model") if isinstance(body.get("model"), str) else ""
    return state
