"""Plain Django views of the gateway: health (public), models, concurrency, metrics, the login pages."""

import asyncio
import time

import httpx
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from infer_archive import live
from lanes.models import Lane

from . import metrics
from .config import cache
from .upstream import client

def lane_headers() -> dict:
    return {"authorization": f"Bearer {settings.STRATA_LANE_KEY}"}


async def lane_health(lane: Lane) -> dict:
    """A lane's own /health, or why it could not be read."""
    try:
        response = await client().get(lane.base_url + "/health", headers=lane_headers(), timeout=2.0)
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


async def models(request):
    """GET /v1/models: the enabled routes, in OpenAI's list shape or, with anthropic-version, Anthropic's."""
    routes = await cache.routes()
    names = sorted(routes.by_model)
    created = int(time.time())
    if request.headers.get("anthropic-version"):
        data = [{"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
                for name in names]
        return JsonResponse({"data": data, "has_more": False, "first_id": names[0] if names else None,
                             "last_id": names[-1] if names else None})
    data = [{"id": name, "object": "model", "created": created, "owned_by": "strata"} for name in names]
    return JsonResponse({"object": "list", "data": data})


async def lane_slots(lane: Lane) -> dict:
    try:
        response = await client().get(lane.base_url + "/slots", headers=lane_headers(), timeout=5.0)
        if response.status_code == 200:
            return {"slots": response.json().get("slots", [])}
        return {"slots": [], "error": f"http {response.status_code}"}
    except (httpx.HTTPError, ValueError) as exc:
        return {"slots": [], "error": f"unreachable: {type(exc).__name__}"}


async def concurrency(request):
    """GET /concurrency: what this gateway has in flight, beside each lane's slots."""
    in_flight = sorted((entry.as_json() for entry in list(live.in_flight.values())), key=lambda e: -e["age_s"])
    lanes = [lane async for lane in Lane.objects.filter(enabled=True)]
    slots = await asyncio.gather(*(lane_slots(lane) for lane in lanes))
    report = {}
    for lane, state in zip(lanes, slots):
        state["in_flight"] = [e["id"] for e in in_flight if e["lane"] == lane.name]
        report[lane.name] = state
    return JsonResponse({"in_flight": in_flight, "lanes": report})


async def prometheus(request):
    """GET /metrics: Prometheus text format."""
    return HttpResponse(generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST)


@login_required
def home(request):
    """The page a browser lands on after logging in."""
    from .models import ModelRoute

    routes = ModelRoute.objects.select_related("lane").filter(enabled=True)
    return render(request, "gateway/home.html", {"routes": routes})
