"""In-process cache of what the gates read on every request: routes, lanes and API keys.

Reading them from the database on every request costs thread hops and queries on the hot
path; they change rarely. The cache is dropped:
- at once in this process when a ModelRoute, Lane or ApiKey is saved or deleted here
  (Django admin runs in the gateway process), by the signal receivers in `gateway.apps`;
- within 50 ms in every process on this host when one of them saves or deletes such a row
  (admin, `manage.py api_keys`, a shell using .save()): the same receivers touch a stamp
  file in var/, whose mtime the cache compares at most every 50 ms;
- otherwise (a queryset .update(), a database edited from another host) after
  `settings.STRATA_CONFIG_TTL` seconds: an entry older than that is served once more while a
  background read replaces it, so a slow database never stalls a request.
"""

import asyncio
import os
import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction


STAMP_CHECK_EVERY = 0.05  # seconds: a stat per request costs more than everything else the cache does


@dataclass(frozen=True)
class CachedKey:
    """What auth needs of an ApiKey row (no ORM object is shared across threads)."""

    id: int
    name: str
    user_id: int | None
    last_used: float | None  # epoch seconds


@dataclass(frozen=True)
class Routes:
    """All enabled routes by model name (lanes loaded), and the default route."""

    by_model: dict
    default: object

    def find(self, model: str):
        return self.by_model.get(model) or self.default


class ConfigCache:
    """Routes and keys, each with the time it was read and the stamp generation it belongs to.

    A value past the TTL is still served while one background read refreshes it (a slow
    database never stalls requests); after a stamp change or clear() it is read again before
    use. Concurrent misses share one read.
    """

    def __init__(self):
        self._stamp = None
        self._stamp_checked = -1.0
        self._generation = 0
        self._routes: tuple | None = None  # (Routes, loaded_at, generation)
        self._keys: dict[str, tuple] = {}  # hash -> (CachedKey, loaded_at, generation)
        self._loading: dict = {}  # what -> asyncio.Task

    # -- freshness --------------------------------------------------------------------------

    @staticmethod
    def _read_stamp():
        try:
            return os.stat(settings.STRATA_CONFIG_STAMP).st_mtime_ns
        except OSError:
            return None

    def _check(self):
        now = time.monotonic()
        if now - self._stamp_checked < STAMP_CHECK_EVERY:
            return
        self._stamp_checked = now
        stamp = self._read_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            self.clear(keep_stamp=True)

    def clear(self, keep_stamp: bool = False):
        self._generation += 1
        self._routes, self._keys = None, {}
        if not keep_stamp:
            self._stamp, self._stamp_checked = None, -1.0

    async def _load(self, what, loader, *args):
        """One read per `what` at a time; others wait for its result."""
        task = self._loading.get(what)
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(sync_to_async(loader)(*args))
            self._loading[what] = task
            task.add_done_callback(lambda t, what=what: self._loading.pop(what, None) if self._loading.get(what) is t else None)
        return await asyncio.shield(task)

    def _refresh_later(self, what, coro_fn):
        if what not in self._loading:
            task = asyncio.ensure_future(coro_fn())
            task.add_done_callback(lambda t: t.exception())  # logged by asyncio otherwise; a failed refresh retries
        return None

    # -- routes -----------------------------------------------------------------------------

    async def routes(self) -> Routes:
        self._check()
        cached = self._routes
        if cached is not None and cached[2] == self._generation:
            if time.monotonic() - cached[1] > settings.STRATA_CONFIG_TTL:
                self._refresh_later("routes", self._read_routes)
            return cached[0]
        return await self._read_routes()

    async def _read_routes(self) -> Routes:
        generation = self._generation
        routes = await self._load("routes", _load_routes)
        if generation == self._generation:
            self._routes = (routes, time.monotonic(), generation)
        return routes

    # -- keys -------------------------------------------------------------------------------

    async def key(self, key_hash: str) -> CachedKey | None:
        """The active key with this hash, or None. Only found keys are cached."""
        self._check()
        cached = self._keys.get(key_hash)
        if cached is not None and cached[2] == self._generation:
            if time.monotonic() - cached[1] > settings.STRATA_CONFIG_TTL:
                self._refresh_later(("key", key_hash), lambda: self._read_key(key_hash))
            return cached[0]
        return await self._read_key(key_hash)

    async def _read_key(self, key_hash: str) -> CachedKey | None:
        generation = self._generation
        found = await self._load(("key", key_hash), _load_key, key_hash)
        if generation == self._generation:
            if found is not None:
                self._keys[key_hash] = (found, time.monotonic(), generation)
            else:
                self._keys.pop(key_hash, None)
        return found

    def touched(self, key_hash: str, when: float):
        """Remember a last_used write, so the next one waits a minute."""
        cached = self._keys.get(key_hash)
        if cached is not None:
            key = cached[0]
            self._keys[key_hash] = (CachedKey(key.id, key.name, key.user_id, when), cached[1], cached[2])


def _load_routes() -> Routes:
    from gateway.models import ModelRoute

    rows = list(ModelRoute.objects.select_related("lane").filter(enabled=True))
    return Routes({r.model_name: r for r in rows}, next((r for r in rows if r.is_default), None))


def _load_key(key_hash: str) -> CachedKey | None:
    from gateway.models import ApiKey

    row = ApiKey.objects.filter(key_hash=key_hash, revoked_at__isnull=True).values_list(
        "id", "name", "user_id", "last_used").first()
    if row is None:
        return None
    return CachedKey(row[0], row[1], row[2], row[3].timestamp() if row[3] else None)


cache = ConfigCache()


def bump():
    """Tell every gateway process on this host that routes, lanes or keys changed."""
    cache.clear()
    path = settings.STRATA_CONFIG_STAMP
    try:
        with open(path, "a"):
            pass
        os.utime(path, ns=(time.time_ns(), time.time_ns()))
    except OSError:
        pass  # the TTL still applies


def changed(**kwargs):
    """Signal receiver: bump once the change is committed (a reader must not reload the old rows)."""
    transaction.on_commit(bump, using=kwargs.get("using"))
