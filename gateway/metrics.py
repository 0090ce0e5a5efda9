"""Prometheus metrics of the gateway process, exported at /metrics (prometheus-client)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

registry = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("strata_requests", "API requests by outcome", ["status", "code", "lane", "dialect"],
                   registry=registry)
TTFT = Histogram("strata_ttft_seconds", "Time from the request's body to the first upstream byte", ["lane"],
                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=registry)
DURATION = Histogram("strata_request_duration_seconds", "Whole request, first byte in to last byte out", ["lane"],
                     buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600), registry=registry)
GATES = Histogram("strata_gateway_overhead_seconds", "Time in the gates before forwarding (lane counting excluded)",
                  buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1), registry=registry)
TOKENS = Counter("strata_tokens", "Tokens by kind, from the upstream's usage", ["kind", "lane"], registry=registry)
IN_FLIGHT = Gauge("strata_in_flight", "Requests in flight in this gateway process", registry=registry)
PRECHECK = Counter("strata_precheck", "Window pre-check outcomes", ["outcome"], registry=registry)


def observe(status: str, http_status: int | None, lane: str, dialect: str, ttft_ms=None, duration_ms=None,
            gateway_ms=None, prompt_tokens=None, completion_tokens=None, cached_tokens=None):
    REQUESTS.labels(status, str(http_status or 0), lane, dialect).inc()
    if ttft_ms is not None:
        TTFT.labels(lane).observe(ttft_ms / 1000)
    if duration_ms is not None:
        DURATION.labels(lane).observe(duration_ms / 1000)
    if gateway_ms is not None:
        GATES.observe(gateway_ms / 1000)
    for kind, value in (("prompt", prompt_tokens), ("completion", completion_tokens), ("cached", cached_tokens)):
        if value:
            TOKENS.labels(kind, lane).inc(value)
