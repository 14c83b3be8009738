"""The store against the real S3 server behind a fault-injecting proxy (s3_fault_proxy).

A lost reply to the conditional PUT that commits `latest` must be settled by reading
`latest` back: the checkpoint it committed is kept, never deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkpoint_fixtures import (  # noqa: F401
    SECRET_KEY,
    S3Server,
    checkpoint_cache_dir,
    read_tree,
    s3_server,
    write_tree,
)
from s3_fault_proxy import Fault, FaultProxy, Rule

from wrapper.checkpoint import CheckpointStore, mark_complete
from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.retry import RetryPolicy

pytestmark = pytest.mark.s3
REPO = Path(__file__).resolve().parents[1]


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


# -- the fault matrix: each S3 call of the commit x {drop reply, reset, stall, slow} ------

# (name, method, path) of the calls a publish makes from reading `latest` to the end.
COMMIT_CALLS = (
    ("stat latest", "HEAD", r"/latest(\?|$)"),
    ("read latest", "GET", r"/latest(\?|$)"),
    ("write manifest", "PUT", r"/manifests/"),
    ("commit latest", "PUT", r"/latest(\?|$)"),
    ("list manifests (GC)", "GET", r"prefix=[^&]*manifests"),
    ("delete retired (GC)", "DELETE", r"/(manifests|objects)/"),
    ("release lease", "DELETE", r"/lease(\?|$)"),
)
FAULTS = (Fault.DROP_REPLY, Fault.RESET, Fault.STALL, Fault.SLOW)


def fault_case(server: S3Server, proxy: FaultProxy, work: Path, call: tuple[str, str, str],
               fault: Fault, times: int = 1) -> dict[str, object]:
    """Publish v2 over v1 through the proxy with one fault at one call; check that
    `latest` restores to v1 or v2 byte for byte, that a publish that said "done" did
    commit, and that the next publish leaves nothing torn or orphaned."""
    name, method, path = call
    url = server.url(f"fault-{uuid.uuid4().hex[:12]}")
    direct = CheckpointStore(url, retention=1, storage_options=server.storage_options)
    versions = {1: _version(work / "v1", 1)}
    direct.publish(work / "v1")
    versions[2] = _version(work / "v2", 2)
    proxied = CheckpointStore(
        url, retention=1, retry=RetryPolicy(attempts=3, base_s=0.05, deadline_s=30),
        storage_options=proxied_options(server, proxy, config_kwargs={
            "connect_timeout": 2, "read_timeout": 2}))
    rule = proxy.add(Rule(method, path, fault, times=times, stall_s=30, rate_bps=4000))
    try:
        proxied.publish(work / "v2")
        outcome = "committed"
    except CheckpointError as error:
        outcome = f"error: {str(error)[:80]}"
    finally:
        proxy.clear()
    restored = direct.restore(work / "out")
    assert restored is not None and not restored.fell_back, restored
    assert read_tree(work / "out") == versions[restored.step or 0]
    if outcome == "committed":
        assert restored.step == 2, "publish said done, `latest` is not its checkpoint"
    assert direct.verify().all_ok
    healed = direct.publish(work / "v2")
    assert healed.step == 2
    assert all(info.state == "complete" for info in direct.list())
    assert direct.verify().orphan_blobs == 0
    return {"call": name, "fault": fault.value, "times": "always" if times > 1 else "once",
            "hit": rule.hits > 0, "outcome": outcome, "latest": restored.step, "losses": 0}


MATRIX_LANES = 4


@pytest.mark.slow
def test_fault_matrix_of_the_commit(s3_server: S3Server, proxy: FaultProxy,  # noqa: F811
                                    tmp_path: Path) -> None:
    cases = [(f"c{index}-{fault.value}", call, fault, 1)
             for index, call in enumerate(COMMIT_CALLS) for fault in FAULTS]
    # the commit PUT faulted at every try: the outcome must be settled
    cases += [(f"always-{fault.value}", COMMIT_CALLS[3], fault, 10**9) for fault in FAULTS]
    # Most of the matrix's time is waiting: a stalled reply holds a case until the
    # client's 2 s read timeout fires. The cases share nothing but the server (each
    # publishes to a prefix of its own), so they run in lanes side by side, each lane
    # through a proxy of its own (a rule faults whatever passes its proxy) and its cases
    # one after the other; the stalls are spread over the lanes.
    lanes: list[list[int]] = [[] for _ in range(MATRIX_LANES)]
    for k in range(len(cases)):
        lanes[(k // len(FAULTS) + k) % MATRIX_LANES].append(k)

    def run_lane(lane: list[int], lane_proxy: FaultProxy) -> dict[int, dict[str, object]]:
        out = {}
        for k in lane:
            name, call, fault, times = cases[k]
            work = tmp_path / name
            work.mkdir()
            out[k] = fault_case(s3_server, lane_proxy, work, call, fault, times=times)
        return out

    def own_proxy(lane: list[int]) -> dict[int, dict[str, object]]:
        with FaultProxy(s3_server.endpoint) as lane_proxy:
            return run_lane(lane, lane_proxy)

    with ThreadPoolExecutor(max_workers=MATRIX_LANES - 1) as pool:
        others = [pool.submit(own_proxy, lane) for lane in lanes[1:]]
        done = run_lane(lanes[0], proxy)
        for future in others:
            done.update(future.result())
    rows = [done[k] for k in range(len(cases))]
    report = os.environ.get("RESCHED_FAULT_MATRIX")
    if report:
        Path(report).write_text(json.dumps(rows, indent=1))
    assert all(row["hit"] for row in rows), [r for r in rows if not r["hit"]]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.value for f in FAULTS])
def test_a_fault_at_the_commit_put_loses_nothing(s3_server: S3Server, proxy: FaultProxy,  # noqa: F811
                                                 tmp_path: Path, fault: Fault) -> None:
    row = fault_case(s3_server, proxy, tmp_path, COMMIT_CALLS[3], fault)
    assert row["hit"] and row["latest"] in (1, 2)


# -- bounded: a server that stops answering, a server killed mid-publish --------------------

CLI = r"""
import atexit, os, sys
sys.path.insert(0, os.environ["REPO"])
def _peak():  # the process's own peak RSS (KiB), for the memory-bound checks
    if os.environ.get("PEAK_FILE"):
        with open("/proc/self/status") as status:
            peak = next(l for l in status if l.startswith("VmHWM")).split()[1]
        with open(os.environ["PEAK_FILE"], "w") as out:
            out.write(peak)
atexit.register(_peak)
from workflows.cli import main
sys.argv = ["resched", "checkpoint", *sys.argv[1:]]
main()
"""


def _cli_env(server: S3Server, proxy: FaultProxy) -> dict[str, str]:
    return {**server.env, "AWS_ENDPOINT_URL": proxy.endpoint, "PYTHONPATH": str(REPO),
            "REPO": str(REPO), "RESCHED_S3_CONNECT_TIMEOUT_S": "1",
            "RESCHED_S3_READ_TIMEOUT_S": "1", "RESCHED_STORE_DEADLINE_S": "4"}


def _one_error_line(done: subprocess.CompletedProcess[str], proxy: FaultProxy) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("resched: error:") and proxy.endpoint in lines[0], lines[0]
    assert SECRET_KEY not in done.stderr + done.stdout
    return lines[0]


def test_a_server_that_stops_answering_ends_publish_and_restore_with_one_line(
        s3_server: S3Server, proxy: FaultProxy, tmp_path: Path) -> None:  # noqa: F811
    url = s3_server.url(f"stopped-{uuid.uuid4().hex[:12]}")
    _version(tmp_path / "v1", 1)
    CheckpointStore(url, storage_options=s3_server.storage_options).publish(tmp_path / "v1")
    _version(tmp_path / "v2", 2)
    proxy.add(Rule("*", r".", Fault.STALL, times=10**9, stall_s=600))  # accepts, never answers
    env = _cli_env(s3_server, proxy)
    # the timeout is a safety net for the test run, not the behaviour under test
    for args in (["publish", str(tmp_path / "v2"), url], ["restore", url, str(tmp_path / "out")]):
        done = subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True,
                              text=True, timeout=240)
        _one_error_line(done, proxy)
    proxy.clear()
    restored = CheckpointStore(url, storage_options=s3_server.storage_options).restore(
        tmp_path / "after")
    assert restored is not None and restored.step == 1


def test_a_server_killed_mid_publish_ends_it_with_one_line(
        s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    url = s3_server.url(f"killed-{uuid.uuid4().hex[:12]}")
    _version(tmp_path / "v1", 1)
    CheckpointStore(url, storage_options=s3_server.storage_options).publish(tmp_path / "v1")
    big = tmp_path / "v2"
    write_tree(big, {f"shard{i}.bin": os.urandom(4 << 20) for i in range(6)})
    mark_complete(big, 2)
    proxy = FaultProxy(s3_server.endpoint)
    rule = proxy.add(Rule("PUT", r"/objects/", Fault.STALL, times=10**9, stall_s=600))
    peak = tmp_path / "peak-kib"
    child = subprocess.Popen([sys.executable, "-c", CLI, "publish", str(big), url],
                             env={**_cli_env(s3_server, proxy), "PEAK_FILE": str(peak)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while rule.hits == 0 and child.poll() is None:
        time.sleep(0.05)
    proxy.kill_server()  # the "server" is gone: open connections reset, new ones too
    out, err = child.communicate(timeout=240)
    proxy.stop()
    line = _one_error_line(subprocess.CompletedProcess(child.args, child.returncode, out, err),
                           proxy)
    assert "previous checkpoint is still the latest" in line
    # Memory stays bounded while the server is gone: the retries hold no growing buffer
    # (the probe saw 1.1 GB for this publish of 24 MiB). The bound is the interpreter
    # with botocore and fsspec (~150 MiB) plus a few copies of one part in flight.
    peak_mib = int(peak.read_text()) / 1024
    assert peak_mib < 400, f"peak RSS {peak_mib:.0f} MiB while the server was gone"
    restored = CheckpointStore(url, storage_options=s3_server.storage_options).restore(
        tmp_path / "after")
    assert restored is not None and restored.step == 1
