"""The store against the real S3 server behind a fault-injecting proxy (s3_fault_proxy).

A lost reply to the conditional PUT that commits `latest` must be settled by reading
`latest` back: the checkpoint it committed is kept, never deleted.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpoint_fixtures import (  # noqa: F401
    S3Server,
    checkpoint_cache_dir,
    read_tree,
    s3_server,
    write_tree,
)
from s3_fault_proxy import Fault, FaultProxy, Rule

from wrapper.checkpoint import CheckpointStore, mark_complete

pytestmark = pytest.mark.s3


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:  # noqa: F811
    with FaultProxy(s3_server.endpoint) as running:
        yield running


def proxied_options(server: S3Server, proxy: FaultProxy, **timeouts: float) -> dict:
    options = {**server.storage_options,
               "client_kwargs": {"endpoint_url": proxy.endpoint}}
    options.update(timeouts)
    return options


def _version(root: Path, step: int) -> dict[str, bytes]:
    files = {"model.pt": f"weights of step {step} ".encode() + os.urandom(2000),
             "opt/state.pt": os.urandom(500)}
    write_tree(root, files)
    mark_complete(root, step)
    return files


def test_a_lost_reply_to_the_commit_keeps_the_committed_checkpoint(
        s3_server: S3Server, proxy: FaultProxy, tmp_path: Path) -> None:  # noqa: F811
    url = s3_server.url(f"lost-{uuid.uuid4().hex[:12]}")
    store = CheckpointStore(url, retention=1,
                            storage_options=proxied_options(s3_server, proxy))
    _version(tmp_path / "v1", 1)
    store.publish(tmp_path / "v1")
    v2 = _version(tmp_path / "v2", 2)
    rule = proxy.add(Rule("PUT", r"/latest(\?|$)", Fault.DROP_REPLY, header="if-match"))
    result = store.publish(tmp_path / "v2")
    assert rule.hits == 1  # the server applied the PUT, the client never saw its answer
    assert result.step == 2 and result.changed
    direct = CheckpointStore(url, storage_options=s3_server.storage_options)
    restored = direct.restore(tmp_path / "out")
    assert restored is not None and restored.step == 2 and not restored.fell_back
    assert read_tree(tmp_path / "out") == v2
    assert direct.verify().all_ok
