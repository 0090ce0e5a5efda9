"""The gates every API POST passes, in order (SPEC section 2). Forward comes after the last."""

from .gates import auth, body, record, route

GATES = [
    auth.authenticate,   # 1. API key or login session, else 401 NOT_LOGGED_IN
    body.parse,          #    JSON body, once
    record.open_row,     #    the archive row: the request is visible in flight from here
    route.resolve,       # 2. model -> lane or upstream URL
]


async def run_gates(state):
    """Pass the state through every gate; the first ApiError stops it."""
    for gate in GATES:
        state = await gate(state)
    return state
