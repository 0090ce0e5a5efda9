"""Fixtures for the gateway tests: a lane on a scripted engine wired into the session stack's gateway,
and quick reads of the stack's archive rows.

The scripted lane (fakelane.py) is the real LaneApp with the real tokenizer, template and
window arithmetic; only the engine is scripted, so a test can see exactly what the model
would have been given (`engine.requests[-1]["prompt"]`, max_tokens, the reasoning budget).
It runs in this process on a free port with the stack's lane key; Lane rows point the
stack's gateway at it:
- `fakelane`: max_context 8192, slack 16, fit_max_tokens off (the lane answers 400 where
  the output does not fit, so the rewrite net has something to catch); route `strata-fake`;
- `fakelane-wide`: the same lane, but the gateway believes its window is 100000 tokens, so
  the pre-check lets an over-long prompt through to the lane's own 400; route `strata-wide`.
"""

import sqlite3
import time

import pytest

from fakelane import ServedFakeLane

FAKE_CONTEXT = 8192


@pytest.fixture(scope="session")
def fake_lanes(stack):
    """{lane name: served scripted lane}, registered in the stack's database with their routes."""
    lanes = {name: ServedFakeLane(stack.lane_key, max_context=FAKE_CONTEXT, slack=16, fit=False, name=name).start()
             for name in ("fakelane", "fakelane-wide")}
    rows = [("fakelane", lanes["fakelane"].port, FAKE_CONTEXT, "strata-fake"),
            ("fakelane-wide", lanes["fakelane-wide"].port, 100000, "strata-wide")]
    stack.django(  # .save() (update_or_create) so the gateway's route cache hears of it
        "from lanes.models import Lane\nfrom gateway.models import ModelRoute\n"
        f"for name, port, ctx, model in {rows!r}:\n"
        "    lane, _ = Lane.objects.update_or_create(name=name, defaults=dict(port=port, max_context=ctx, slack=16, "
        "fit_max_tokens=False))\n"
        "    ModelRoute.objects.update_or_create(model_name=model, defaults=dict(lane=lane))\n"
        "print(1)"
    )
    yield lanes
    for served in lanes.values():
        served.stop()


@pytest.fixture
def fake(fake_lanes):
    """The scripted lane behind `strata-fake`, its scripts and request log cleared for this test."""
    fake_lanes["fakelane"].engine.reset()
    return fake_lanes["fakelane"]


@pytest.fixture
def wide(fake_lanes):
    """The scripted lane behind `strata-wide` (the gateway thinks its window is 100000 tokens)."""
    fake_lanes["fakelane-wide"].engine.reset()
    return fake_lanes["fakelane-wide"]


class Archive:
    """Reads the stack's InferRecord rows straight from its SQLite file (no Django process to start)."""

    def __init__(self, stack):
        self.path = stack.var_dir / "strata.sqlite3"

    def query(self, sql: str, args=()) -> list[dict]:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=20) as db:
            db.row_factory = sqlite3.Row
            return [dict(r) for r in db.execute(sql, args)]

    def latest(self, model: str | None = None, finished: bool = True, timeout: float = 30) -> dict:
        """The newest row (for `model`), waiting until it is written (and finished)."""
        sql = ("SELECT r.*, k.name AS key_name FROM infer_archive_inferrecord r "
               "LEFT JOIN gateway_apikey k ON k.id = r.api_key_id")
        sql += " WHERE r.model = ?" if model else ""
        sql += " ORDER BY r.started_at DESC LIMIT 1"
        deadline = time.monotonic() + timeout
        while True:
            rows = self.query(sql, (model,) if model else ())
            if rows and (not finished or rows[0]["finished_at"] is not None):
                return rows[0]
            assert time.monotonic() < deadline, f"no {'finished ' if finished else ''}row for {model!r}"
            time.sleep(0.05)

    def next_row(self, model: str):
        """Call before a request: returns a function that waits for that request's (finished) row.

        Rows are written a few milliseconds after the fact (the archive writer), so "the newest row"
        read at once could still be the previous request's."""
        before = self.count(model)

        def wait(timeout: float = 30) -> dict:
            deadline = time.monotonic() + timeout
            while self.count(model) <= before:
                assert time.monotonic() < deadline, f"no new row for {model!r}"
                time.sleep(0.02)
            return self.latest(model, timeout=timeout)

        return wait

    def count(self, model: str) -> int:
        return self.query("SELECT COUNT(*) AS n FROM infer_archive_inferrecord WHERE model = ?", (model,))[0]["n"]


@pytest.fixture(scope="session")
def archive(stack):
    return Archive(stack)
