"""Archive fixtures: redis-server, moto's S3 server, isolated archive environments (see archive_harness)."""

import os
import shutil
import subprocess
import uuid

import pytest
import redis as redis_lib

from archive_harness import PY, ROOT, ArchiveEnv, RedisServer, S3Server, _redis_dbs


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: `make test` installs it (apt-get install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def template_db(tmp_path_factory):
    """A migrated SQLite file, copied for each test (migrating costs seconds on 2 cores)."""
    var = tmp_path_factory.mktemp("archive-template")
    env = {**os.environ, "STRATA_VAR_DIR": str(var), "DATABASE_URL": f"sqlite:///{var / 'db.sqlite3'}"}
    subprocess.run([PY, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    return var / "db.sqlite3"


@pytest.fixture
def archive_env(tmp_path, template_db, redis_server, s3_server):
    """Factory: an ArchiveEnv with its own var dir, database copy, bucket and Redis database."""
    made = []

    def make(**overrides) -> ArchiveEnv:
        var = tmp_path / f"var{len(made)}"
        var.mkdir()
        shutil.copy(template_db, var / "db.sqlite3")
        db_index = next(_redis_dbs) % 16
        redis_lib.Redis(port=redis_server.port, db=db_index).flushdb()
        env = ArchiveEnv(var, f"{redis_server.url}/{db_index}", s3_server, **overrides)
        made.append(env)
        return env

    yield make
    for env in made:
        env.stop()
    if s3_server.proc is None:  # a test left the S3 server down
        s3_server.start()


@pytest.fixture
def archive_settings(settings, tmp_path):
    """In-process: the archive in tmp_path, tasks eager, no MinIO (tests add it); the writer reset after."""
    from infer_archive import writer

    settings.ARCHIVE_DIR = tmp_path / "archive"
    settings.STRATA_ARCHIVE_ENABLED = True
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.MINIO_ENDPOINT = ""
    settings.ARCHIVE_SEGMENT_MAX_BYTES = 64 << 20
    settings.ARCHIVE_SEGMENT_MAX_AGE_S = 600
    settings.ARCHIVE_LOCAL_RETENTION_S = 7 * 86400
    settings.ARCHIVE_SWEEP_INTERVAL_S = 3600
    settings.ARCHIVE_FAULT_PAUSE = ""
    yield settings
    writer.writer().stop()


@pytest.fixture
def with_s3(archive_settings, s3_server):
    """In-process settings pointed at the moto server, with a fresh bucket."""
    archive_settings.MINIO_ENDPOINT = s3_server.endpoint
    archive_settings.MINIO_ACCESS_KEY = archive_settings.MINIO_SECRET_KEY = "test"
    archive_settings.MINIO_BUCKET = f"inproc-{uuid.uuid4().hex[:12]}"
    archive_settings.MINIO_SECURE = False
    return archive_settings
