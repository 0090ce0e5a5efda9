"""Plain Django views of the gateway: public health."""

import asyncio

import httpx
from django.conf import settings
from django.http import JsonResponse

from lanes.models import Lane

from .upstream import client


async def lane_health(lane: Lane) -> dict:
    """A lane's own /health, or why it could not be read."""
    try:
        response = await client().get(
            lane.base_url + "/health", headers={"authorization": f"Bearer {settings.STRATA_LANE_KEY}"}, timeout=2.0
        )
        return response.json() if response.status_code == 200 else {"state": "error", "http_status": response.status_code}
    except (httpx.HTTPError, ValueError):
        return {"state": "unreachable"}


async def health(request):
    """GET /health (public): the gateway is up, and each enabled lane's state."""
    lanes = [lane async for lane in Lane.objects.filter(enabled=True)]
    states = await asyncio.gather(*(lane_health(lane) for lane in lanes))
    report = {lane.name: state for lane, state in zip(lanes, states)}
    ready = all(state.get("state") == "ready" for state in states)
    return JsonResponse({"status": "ok" if ready else "degraded", "lanes": report})
