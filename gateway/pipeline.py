"""The gates every API POST passes, in order (SPEC section 2), in one place.

    1. auth        API key (Bearer or x-api-key) or login session, else 401 NOT_LOGGED_IN
       body        the JSON body, parsed once
       record      the live entry and the archive row: in flight from here
    2. route       model -> one of our lanes or an upstream URL (cached routes table)
    3. documents   PDF / DOCX / XLSX / CSV / text parts -> text, cut to the window
    4. thinking    no thinking preference -> reasoning_budget_tokens keeps room for the answer
    5. precheck    character-class bound, the lane's exact count when it may not fit:
                   400 at once, or max_tokens clamped
    6. forward     the upstream's bytes to the client chunk by chunk, tee to the archive
    7. rewrite     a window 400 from the lane: retry once clamped, or a structured 400

count_tokens requests pass the gates up to the pre-check (auth, body, record, route,
documents), so the count is that of what the model would be given. Each gate is
`async def gate(state) -> state` and raises ApiError to stop the request.
"""

from . import forward as forward_gate
from .gates import auth, body, documents, precheck, record, rewrite, route, thinking

GATES = [
    auth.authenticate,             # 1
    body.parse,
    record.open_row,
    route.resolve,                 # 2
    documents.extract_documents,   # 3
    thinking.guard,                # 4
    precheck.check,                # 5
]
COUNT_GATES = GATES[: GATES.index(documents.extract_documents) + 1]
FORWARD = forward_gate.forward     # 6, which hands a held 400 to:
REWRITE_NET = rewrite.examine      # 7


async def run_gates(state):
    """Pass the state through every gate that applies to its path; the first ApiError stops it."""
    for gate in COUNT_GATES if state.counting else GATES:
        state = await gate(state)
    return state
