"""Gate 2, route: the request's `model` -> a lane or an upstream URL, from the routes table.

Routes are read from the in-process cache (gateway.config): an edit in admin is seen by the
next request; see there how edits made elsewhere are picked up.
"""

from django.conf import settings

from gateway.config import cache
from gateway.models import ModelRoute
from gateway.state import RequestState
from lanes.dialects.errors import ApiError, bad_request


async def find_route(model: str) -> ModelRoute | None:
    """The enabled route for `model`, else the enabled default route, else None."""
    return (await cache.routes()).find(model)


async def resolve(state: RequestState) -> RequestState:
    route = await find_route(state.model)
    if route is None:
        raise bad_request(f"model {state.model!r} has no route and no default route is set")
    state.route = route
    if route.lane_id:
        if not route.lane.enabled:
            raise ApiError(503, f"lane {route.lane.name!r} for model {state.model!r} is disabled")
        state.lane = route.lane
        state.upstream_url = route.lane.base_url + state.path
        state.upstream_key = settings.STRATA_LANE_KEY
    else:
        base = route.upstream_url.rstrip("/")
        # A base given as ".../v1" (as the OpenAI SDK takes it) must not double the /v1.
        path = state.path[3:] if base.endswith("/v1") and state.path.startswith("/v1/") else state.path
        state.upstream_url = base + path
        state.upstream_key = route.upstream_key
    if state.entry is not None:
        state.entry.route, state.entry.lane = route.model_name, state.lane.name if state.lane else ""
    return state
