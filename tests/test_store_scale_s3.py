"""Many writers at once against the real S3 server: nothing lost, nothing corrupt.

Bounded shapes of the scale question (docs/simulate.md has the bigger measured runs,
benchmarks/store_scale.py): 24 tasks publishing their own stores at once, each carrying
its history; 6 processes racing for one store."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from checkpoint_fixtures import S3Server, checkpoint_cache_dir, s3_server  # noqa: F401
from store_scale_fixtures import many_stores, one_store

pytestmark = [pytest.mark.s3, pytest.mark.slow]


def test_many_tasks_each_with_its_store_lose_no_update(s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    base = s3_server.url(f"scale-{uuid.uuid4().hex[:8]}")
    result = many_stores(s3_server.storage_options, base, tmp_path, tasks=24, rounds=2)
    assert result.errors == [] and result.committed == 24 * 2
    assert (result.lost_updates, result.corrupt) == (0, 0)  # every history has its 2 attempts


def test_writers_racing_for_one_store_are_serialised(s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    url = s3_server.url(f"race-{uuid.uuid4().hex[:8]}")
    result = one_store(s3_server.storage_options, url, tmp_path, writers=6, rounds=3)
    assert result.errors == [], result.errors  # each publish commits or is refused as busy
    assert result.committed >= 1 and result.committed + result.busy == 18
    assert (result.lost_updates, result.corrupt) == (0, 0)
