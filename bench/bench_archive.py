"""The archive's cost and speed, one run, side by side:

    .venv/bin/python bench/bench_archive.py [--records 3000] [--requests 120] [--concurrency 4] [--rounds 3]

1. Streaming throughput through the real gateway, archive on vs off (STRATA_ARCHIVE_ENABLED):
   the gateway (daphne, its own process) forwards to a fake upstream that streams 200 OpenAI
   chunks per request as fast as it can, so the gateway (and the archive beside it) is the
   bottleneck, the worst case for the archive's share. Rounds alternate off/on; the figure is
   the median of each side, the overhead is (off - on) / off.
2. Records per second the writer sustains (append -> gzip member in the segment -> row
   indexed), with request and response bodies of a typical size.
3. Upload throughput of closed segments to an S3 server on loopback (moto's server mode),
   each upload verified (size, MD5 ETag, sha256 metadata).

The machine is noisy (2 cores, shared): compare the figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "tests")]

import httpx  # noqa: E402

from stack import Stack, _die_with_parent, free_port  # noqa: E402

CHUNKS = 200
FAKE_UPSTREAM = r'''
import asyncio, json, sys, uvicorn
CHUNKS = int(sys.argv[2])
def chunk(i):
    return ("data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": "word%d " % i}, "finish_reason": None}]}) + "\n\n").encode()
BODY = [chunk(i) for i in range(CHUNKS)]
TAIL = b': strata-usage {"prompt_tokens": 12, "completion_tokens": %d}\n\ndata: [DONE]\n\n' % CHUNKS
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for piece in BODY:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": TAIL, "more_body": False})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
'''


def start_gateway(var: Path, upstream_port: int, archive: bool) -> tuple[Stack, str]:
    """The gateway alone (no lanes), its default route pointed at the fake upstream."""
    stack = Stack(var, lanes=())
    stack.env["STRATA_ARCHIVE_ENABLED"] = "1" if archive else "0"
    stack.env.pop("REDIS_URL", None)
    for name in ("MINIO_ENDPOINT",):
        stack.env.pop(name, None)
    var.mkdir(parents=True, exist_ok=True)
    stack.manage("migrate", "--verbosity", "0")
    stack.manage("shell", "--no-imports", "-c",
                 "from gateway.models import ModelRoute\n"
                 f"ModelRoute.objects.update(lane=None, upstream_url='http://127.0.0.1:{upstream_port}', upstream_key='k')")
    key = stack.create_key("bench")
    stack.start()
    return stack, key


async def stream_load(url: str, key: str, requests: int, concurrency: int) -> tuple[float, int]:
    """`requests` streamed completions, `concurrency` at a time; returns (seconds, chunks received)."""
    body = {"model": "strata", "stream": True, "messages": [{"role": "user", "content": "Tell me a story. " * 20}]}
    counter = iter(range(requests))
    received = 0

    async def client_loop(client):
        nonlocal received
        for _ in counter:
            async with client.stream("POST", url + "/v1/chat/completions", json=body,
                                     headers={"authorization": f"Bearer {key}"}) as response:
                assert response.status_code == 200, await response.aread()
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        received += 1

    async with httpx.AsyncClient(timeout=120) as client:
        await stream_load_warmup(client, url, key, body)
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        return time.perf_counter() - started, received


async def stream_load_warmup(client, url, key, body):
    for _ in range(3):
        async with client.stream("POST", url + "/v1/chat/completions", json=body,
                                 headers={"authorization": f"Bearer {key}"}) as response:
            await response.aread()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (from /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_streaming(args) -> dict:
    upstream_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-c", FAKE_UPSTREAM, str(upstream_port), str(CHUNKS)],
                                preexec_fn=_die_with_parent)
    time.sleep(1.5)
    results = {"off": [], "on": []}
    cpu = {"off": [], "on": []}  # gateway CPU ms per request (archive thread included)
    archived = 0
    try:
        with tempfile.TemporaryDirectory(prefix="bench-archive-") as tmp:
            for rnd in range(args.rounds):
                for side in ("off", "on"):
                    stack, key = start_gateway(Path(tmp) / f"{side}{rnd}", upstream_port, side == "on")
                    try:
                        pid = stack.procs["gateway"].pid
                        cpu0 = cpu_seconds(pid)
                        seconds, chunks = asyncio.run(stream_load(stack.gateway_url, key, args.requests, args.concurrency))
                        assert chunks == args.requests * CHUNKS, (chunks, args.requests * CHUNKS)
                        results[side].append(chunks / seconds)
                        time.sleep(1.5)  # both sides: the archive thread finishes its batch
                        cpu[side].append((cpu_seconds(pid) - cpu0) * 1000 / (args.requests + 3))
                        if side == "on":
                            archived += stack.django(
                                "import json\nfrom infer_archive.models import InferRecord\n"
                                "print(json.dumps(InferRecord.objects.exclude(segment='').count()))")
                    finally:
                        stack.stop()
                    print(f"  round {rnd + 1} archive {side:3}: {results[side][-1]:10.0f} chunks/s   "
                          f"gateway CPU {cpu[side][-1]:6.2f} ms/request", flush=True)
    finally:
        upstream.terminate()
        upstream.wait()
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    paired = statistics.median((o - n) / o * 100 for o, n in zip(results["off"], results["on"]))
    cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    return {"off": off, "on": on, "overhead_pct": (off - on) / off * 100, "paired_pct": paired,
            "cpu_off": cpu_off, "cpu_on": cpu_on, "cpu_pct": (cpu_on - cpu_off) / cpu_off * 100,
            "archived": archived, "expected_archived": (args.requests + 3) * args.rounds}


def django_env(tmp: Path):
    os.environ.update({
        "STRATA_VAR_DIR": str(tmp), "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "STRATA_ARCHIVE_DIR": str(tmp / "archive"), "DJANGO_SETTINGS_MODULE": "stratasite.settings",
        "STRATA_LOG_LEVEL": "WARNING",
    })
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def bench_writer(args) -> dict:
    from django.conf import settings

    from infer_archive import writer
    from infer_archive.models import InferRecord

    settings.MINIO_ENDPOINT = ""
    request = json.dumps({"model": "strata", "stream": True, "messages": [
        {"role": "system", "content": "You are a helpful assistant. " * 10},
        {"role": "user", "content": "Explain the lighthouse keeper's routine in detail. " * 30}]}).encode()
    response = b"".join(
        b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"w%d "}}]}\n\n' % i
        for i in range(60)) + b"data: [DONE]\n\n"
    rows = InferRecord.objects.bulk_create([InferRecord(model="strata", status="ok") for _ in range(args.records)])
    started = time.perf_counter()
    for row in rows:
        writer.append(row.pk, request, response)
    queued = time.perf_counter() - started
    assert writer.flush(600)
    seconds = time.perf_counter() - started
    indexed = InferRecord.objects.exclude(segment="").count()
    assert indexed == args.records, indexed
    writer.writer().stop()
    return {"records": args.records, "seconds": seconds, "per_s": args.records / seconds,
            "append_us": queued / args.records * 1e6, "raw_kib": (len(request) + len(response)) / 1024}


def bench_writer_paced(n: int = 650) -> float:
    """CPU (ms, whole process, the archive thread included) per archived record of the streaming test's size
    (the fake upstream's 200-chunk answer), appended at the gateway's pace (13 every 0.1 s)."""
    from infer_archive import writer
    from infer_archive.models import InferRecord

    def chunk(i):
        return ("data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"content": "word%d " % i}, "finish_reason": None}]}) + "\n\n").encode()

    response = b"".join(chunk(i) for i in range(CHUNKS))
    request = json.dumps({"model": "strata", "stream": True, "messages": [{"role": "user", "content": "Tell me a story. " * 20}]}).encode()
    rows = InferRecord.objects.bulk_create([InferRecord(model="strata", status="ok") for _ in range(n)])
    idle0 = time.process_time()
    time.sleep(n / 130)
    idle = time.process_time() - idle0  # what the process costs doing nothing for as long
    cpu0 = time.process_time()
    for i, row in enumerate(rows):
        writer.append(row.pk, request, response)
        if i % 13 == 12:
            time.sleep(0.1)
    assert writer.flush(120)
    return (time.process_time() - cpu0 - idle) * 1000 / n


def bench_upload(args, tmp: Path) -> dict:
    from django.conf import settings

    from infer_archive import segments, tasks
    from infer_archive.models import Segment

    port = free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        settings.MINIO_ENDPOINT, settings.MINIO_ACCESS_KEY, settings.MINIO_SECRET_KEY = f"127.0.0.1:{port}", "b", "b"
        settings.MINIO_BUCKET, settings.ARCHIVE_LOCAL_RETENTION_S = "bench", 86400
        ids, total = [], 0
        for i in range(args.segments):
            name = segments.new_segment_name()
            path = segments.archive_dir() / name
            path.write_bytes(os.urandom(args.segment_mib << 20))
            sha, md5, size = segments.file_digests(path)
            ids.append(Segment.objects.create(name=name, object_key=segments.object_key(name), status="closed",
                                              size=size, sha256=sha, md5=md5, records=1).pk)
            total += size
        tasks.upload(Segment.objects.create(name="warmup", object_key="w", status="closed").pk)  # bucket, connection
        started = time.perf_counter()
        results = [tasks.upload(i) for i in ids]
        seconds = time.perf_counter() - started
        assert results == ["uploaded"] * len(ids), results
        return {"segments": len(ids), "mib": total / (1 << 20), "seconds": seconds, "mib_s": total / (1 << 20) / seconds}
    finally:
        moto.terminate()
        moto.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--requests", type=int, default=120, help="streamed requests per round and side")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--skip-streaming", action="store_true")
    args = parser.parse_args()

    print(f"1. streaming through the gateway ({CHUNKS} chunks per request, {args.requests} requests x "
          f"{args.concurrency} concurrent, {args.rounds} rounds per side)", flush=True)
    stream = None if args.skip_streaming else bench_streaming(args)
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as tmp:
        django_env(Path(tmp))
        w = bench_writer(args)
        paced_ms = bench_writer_paced()
        u = bench_upload(args, Path(tmp))
        from infer_archive import writer

        writer.writer().stop()
    print()
    print(f"{'measure':44} {'value':>14}")
    if stream:
        print(f"{'streaming, archive off (median chunks/s)':44} {stream['off']:14.0f}")
        print(f"{'streaming, archive on (median chunks/s)':44} {stream['on']:14.0f}")
        verdict = "met" if stream["overhead_pct"] < 2 else "NOT met"
        print(f"{'archive overhead on streaming (goal < 2%)':44} {stream['overhead_pct']:13.2f}%  {verdict}")
        print(f"{'  same, median of per-round pairs':44} {stream['paired_pct']:13.2f}%")
        print(f"{'gateway CPU per request, off (ms)':44} {stream['cpu_off']:14.2f}")
        print(f"{'gateway CPU per request, on (ms)':44} {stream['cpu_on']:14.2f}")
        print(f"{'archive CPU cost in the gateway process':44} {stream['cpu_pct']:13.2f}%")
        print(f"{'records archived by the gateway (on side)':44} {stream['archived']:>8} of {stream['expected_archived']}")
    print(f"{'archive CPU per streamed record, paced (ms)':44} {paced_ms:14.3f}")
    if stream:
        print(f"{'  as a share of gateway CPU per request (off)':44} {paced_ms / stream['cpu_off'] * 100:13.2f}%")
    print(f"{'writer records/s (%.1f KiB raw each)' % w['raw_kib']:44} {w['per_s']:14.0f}")
    print(f"{'writer append() cost on the caller (us)':44} {w['append_us']:14.1f}")
    print(f"{'upload to S3 (moto), verified (MiB/s)':44} {u['mib_s']:14.1f}   "
          f"({u['segments']} x {u['mib'] / u['segments']:.0f} MiB in {u['seconds']:.2f} s)")


if __name__ == "__main__":
    main()
