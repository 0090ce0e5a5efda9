"""Object storage for closed segments: MinIO (or any S3-compatible server) through the `minio` client.

`configured()` is False in the embedded default (no MINIO_ENDPOINT): segments then stay local.
"""

import functools

import urllib3
from django.conf import settings
from minio import Minio
from minio.error import S3Error

# Errors worth retrying: the server is down, slow or answering 5xx.
TRANSIENT = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError)


def configured() -> bool:
    return bool(settings.MINIO_ENDPOINT)


def describe() -> str:
    """Where closed segments go, in words (for admin)."""
    if not configured():
        return "MinIO is not configured (MINIO_ENDPOINT unset): segments stay in the local archive folder."
    return f"MinIO {settings.MINIO_ENDPOINT}, bucket {settings.MINIO_BUCKET!r}"


@functools.lru_cache(maxsize=4)
def _client(endpoint, access_key, secret_key, secure, region) -> Minio:
    # Short timeouts and no urllib3 retries: the Celery task owns retrying, with backoff.
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=3, read=60), retries=False, maxsize=8,
    )
    return Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region, http_client=http)


def client() -> Minio:
    return _client(settings.MINIO_ENDPOINT, settings.MINIO_ACCESS_KEY, settings.MINIO_SECRET_KEY,
                   settings.MINIO_SECURE, settings.MINIO_REGION)


_buckets_seen: set = set()


def ensure_bucket(c: Minio | None = None) -> str:
    """The bucket, created if missing (checked once per process while it exists)."""
    c = c or client()
    bucket = settings.MINIO_BUCKET
    key = (settings.MINIO_ENDPOINT, bucket)
    if key not in _buckets_seen:
        if not c.bucket_exists(bucket):
            try:
                c.make_bucket(bucket)
            except S3Error as exc:
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        _buckets_seen.add(key)
    return bucket


def forget_bucket():
    """After a 'no such bucket' error: check (and create) it again next time."""
    _buckets_seen.clear()


def stat(object_key: str):
    """The object's stat, or None if it does not exist."""
    try:
        return client().stat_object(ensure_bucket(), object_key)
    except S3Error as exc:
        if exc.code in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
            return None
        if exc.code == "NoSuchBucket":
            forget_bucket()
            return None
        raise


def read_range(object_key: str, offset: int, length: int) -> bytes:
    """`length` bytes of the object from `offset`: one ranged GET."""
    response = client().get_object(settings.MINIO_BUCKET, object_key, offset=offset, length=length)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()
