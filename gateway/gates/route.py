"""Gate 2, route: the request's `model` -> a lane or an upstream URL, from the routes table."""

from django.conf import settings

from gateway.models import ModelRoute
from gateway.state import RequestState
from lanes.dialects.errors import ApiError, bad_request


async def find_route(model: str) -> ModelRoute | None:
    """The enabled route for `model`, else the enabled default route, else None."""
    routes = ModelRoute.objects.select_related("lane").filter(enabled=True)
    return await routes.filter(model_name=model).afirst() or await routes.filter(is_default=True).afirst()


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
        state.upstream_url = route.upstream_url.rstrip("/") + state.path
        state.upstream_key = route.upstream_key
    return state
