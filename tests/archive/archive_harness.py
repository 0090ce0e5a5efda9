"""Archive test harness: a real redis-server, an S3-compatible server (moto's server mode, standing in for
MinIO), real Celery worker processes, and an isolated settings environment (var dir, SQLite file,
bucket) shared by the worker and the code under test, which runs in `manage.py shell` subprocesses.

In-process tests (pytest-django's test database) use `archive_settings` instead: the same
settings, applied with pytest-django's `settings` fixture, tasks eager.
"""

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import httpx
import redis as redis_lib

from stack import ROOT, _die_with_parent, free_port

PY = sys.executable
CELERY = str(Path(sys.executable).with_name("celery"))


def wait_until(check, timeout: float, what: str, every: float = 0.1):
    """Liveness deadline: poll `check` until it returns a truthy value; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"not within {timeout}s: {what} (last: {last!r})")


class RedisServer:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
        )
        self.url = f"redis://127.0.0.1:{self.port}"
        client = redis_lib.Redis(port=self.port)

        def ping():
            try:
                return client.ping()
            except redis_lib.ConnectionError:
                return False

        wait_until(ping, 20, "redis-server answers PING")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class S3Server:
    """moto's S3-compatible HTTP server on a fixed loopback port; stop() and start() again simulate an outage."""

    def __init__(self, logdir: Path):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = logdir / "moto.log"
        self.proc = None

    def start(self):
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [PY, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
        )

        def up():
            try:
                return httpx.get(f"http://{self.endpoint}/", timeout=1).status_code < 500
            except httpx.HTTPError:
                return False

        wait_until(up, 30, "moto server answers")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def client(self):
        from minio import Minio

        return Minio(self.endpoint, access_key="test", secret_key="test", secure=False, region="us-east-1")


_redis_dbs = itertools.count(1)


class ArchiveEnv:
    """One isolated archive set-up; `run()` executes code against it, `worker()` starts a Celery worker."""

    def __init__(self, var: Path, redis_url: str, s3: S3Server, **overrides):
        self.var, self.s3 = var, s3
        self.db = var / "db.sqlite3"
        self.bucket = f"arch-{uuid.uuid4().hex[:12]}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "stratasite.settings",
            "STRATA_VAR_DIR": str(var),
            "STRATA_ARCHIVE_DIR": str(var / "archive"),
            "DATABASE_URL": f"sqlite:///{self.db}",
            "REDIS_URL": redis_url,
            "MINIO_ENDPOINT": s3.endpoint, "MINIO_ACCESS_KEY": "test", "MINIO_SECRET_KEY": "test",
            "MINIO_BUCKET": self.bucket,
            "ARCHIVE_SEGMENT_MAX_BYTES": "12000",
            "ARCHIVE_SEGMENT_MAX_AGE_S": "600",
            "ARCHIVE_UPLOAD_RETRY_BASE_S": "0.2",
            "ARCHIVE_UPLOAD_RETRY_MAX_S": "1",
            "ARCHIVE_SWEEP_INTERVAL_S": "1",
            "STRATA_LOG_LEVEL": "INFO",
        }
        self.env.update({k: str(v) for k, v in overrides.items()})
        self.workers: list[subprocess.Popen] = []

    def run(self, code: str, timeout: float = 120):
        """Run Python in a Django shell with these settings; returns the last printed line as JSON."""
        out = subprocess.run(
            [PY, "manage.py", "shell", "--no-imports", "-c", textwrap.dedent(code)], cwd=ROOT, env=self.env,
            capture_output=True, text=True, timeout=timeout,
        )
        if out.returncode:
            raise AssertionError(f"code failed ({out.returncode}):\n{out.stderr[-4000:]}")
        lines = out.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else None

    def worker(self, **env) -> subprocess.Popen:
        """A real `celery -A stratasite worker` (own process group, so a kill takes its pool too)."""
        n = len(self.workers)
        log = open(self.var / f"worker{n}.log", "ab")
        proc = subprocess.Popen(
            [CELERY, "-A", "stratasite", "worker", "--concurrency", "1", "--loglevel", "INFO",
             "--hostname", f"w{n}-{uuid.uuid4().hex[:6]}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env={**self.env, **{k: str(v) for k, v in env.items()}}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(proc)
        wait_until(lambda: proc.poll() is not None or " ready." in self.worker_log(n), 60, "celery worker ready")
        assert proc.poll() is None, self.worker_log(n)[-3000:]
        return proc

    def worker_log(self, n: int = -1) -> str:
        n = n if n >= 0 else len(self.workers) - 1
        path = self.var / f"worker{n}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @staticmethod
    def kill(proc: subprocess.Popen, sig=signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(20)

    def segments(self) -> list[dict]:
        """The Segment rows, read straight from the SQLite file."""
        with sqlite3.connect(self.db, timeout=20) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute("SELECT * FROM infer_archive_segment ORDER BY id")]

    def records(self) -> list[dict]:
        with sqlite3.connect(self.db, timeout=20) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute("SELECT * FROM infer_archive_inferrecord")]

    def objects(self) -> list:
        client = self.s3.client()
        if not client.bucket_exists(self.bucket):
            return []
        return list(client.list_objects(self.bucket, recursive=True))

    def stop(self):
        for proc in self.workers:
            if proc.poll() is None:
                self.kill(proc)


