"""Suite-wide ordering: each pytest-xdist worker starts with its share of the long tests;
and a failed test that used the S3 server reports that server's log.

``--dist worksteal`` hands every worker a contiguous slice of the collection and lets an
idle worker steal the *last* half of the longest queue. A long end-to-end test near the
end of a slice is what gets stolen last, so it starts late and the whole suite waits for
it. Here the known long tests are dealt out across the slices (longest first, each to
the slice with the least long work) and put at the front of their slice; everything else
keeps its order, so a module's tests stay together. The durations are measured ones
(seconds on the 2-core CI machine, `pytest --durations`); a test missing from the table
only loses its place in the balance, never a check.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator

import pytest

# A shell that starts the suite in the background without job control (`pytest ... &` in
# a script) hands it SIGINT ignored, and exec keeps an ignored signal ignored: the
# trainings, wrappers and executors these tests start would never see the Ctrl-C the
# tests send them (seen once: every SIGINT case of the crash matrix "never reached").
# A handler, unlike SIG_IGN, is reset to the default on exec, so the children get
# SIGINT's default again; this process (each xdist worker loads this file) too.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Measured 2026-11-25 (pytest --durations=80, 3 workers, 2 cores); rounded.
LONG_TESTS: dict[str, float] = {
    "tests/test_local_torch_e2e.py::test_template_survives_kill_hang_exit16_and_sigterm_with_identical_weights": 125,
    "tests/test_pinned_pointers_e2e.py::test_a_real_training_saving_every_step_gets_its_periodic_upload_committed[deepspeed]": 80,
    "tests/test_store_crashpoints.py::test_crash_at_every_step_on_s3": 77,
    "tests/test_frameworks_megatron.py::test_fault_resumes_from_the_newest_whole_iteration[torn-in-place]": 52,
    "tests/test_nvrx_straggler_local_e2e.py::test_slowed_task_is_flagged_stopped_and_rescheduled_off_its_node": 45,
    "tests/test_frameworks_deepspeed.py::test_fault_resumes_from_the_last_whole_tag[torn-in-place]": 41,
    "tests/test_s3_faults.py::test_fault_matrix_of_the_commit": 38,
    "tests/test_nvrx_inprocess_e2e.py::test_restart_abort_from_a_deterministic_bug_aborts": 35,
    "tests/test_slurm_cluster.py::test_shipped_multi_node_template_recovers_under_slurm": 35,
    "tests/test_pinned_pointers_e2e.py::test_a_real_training_saving_every_step_gets_its_periodic_upload_committed[megatron]": 34,
    "tests/test_frameworks_hf.py::test_fault_resumes_from_the_newest_whole_checkpoint[torn-in-place]": 26,
    "tests/test_osmo_uploads_e2e.py::test_plain_task_is_uploaded_after_every_exit_and_resumes[slurm]": 24,
    "tests/test_classify_ft_launcher.py::test_real_ft_launcher_heartbeat_hang_with_restarts_exhausted": 24,
    "tests/test_nvrx_ft_launcher_e2e.py::test_a_round_killed_then_a_finished_round_is_complete": 24,
    "tests/test_nvrx_inprocess_e2e.py::test_inprocess_restart_that_succeeds_is_one_complete_attempt": 24,
    "tests/test_prefilter_engines.py::test_every_real_log_line_with_the_hostile_rules": 24,
    "tests/test_wrap_e2e.py::test_example_training_transient_nccl_error_is_retried_in_place_and_resumes": 22,
    "tests/test_nvrx_ft_launcher_e2e.py::test_python_bug_until_in_job_restarts_are_spent_aborts": 20,
    "tests/test_nvrx_slurm.py::test_term_only_training_saves_on_slurm_grace_and_requeues_for_free": 19,
    "tests/test_slurm_cluster.py::test_grace_signal_checkpoints_and_requeues_for_free": 17,
    "tests/test_local_semantics_e2e.py::test_random_chaos_is_reproducible_and_waits_for_progress": 17,
    "tests/test_example_training_faults.py::test_fault_leaves_the_evidence_the_rules_classify[nccl]": 17,
    "tests/test_example_training.py::test_sigkill_at_random_steps_then_resume_is_bit_exact": 16,
    "tests/test_store_scale_s3.py::test_many_tasks_each_with_its_store_lose_no_update": 16,
}
# parametrized ids too long to spell out: every case of the test counts
LONG_PREFIXES: dict[str, float] = {
    "tests/test_framework_progress_e2e.py::test_framework_training_shows_progress_and_takes_a_ckpt_fault[hf_trainer": 32,
    "tests/test_framework_progress_e2e.py::test_framework_training_shows_progress_and_takes_a_ckpt_fault[lightning": 20,
    "tests/test_nvrx_ft_launcher_e2e.py::test_rank_monitor_hang_kills[": 14,
}


def _seconds(nodeid: str) -> float | None:
    if nodeid in LONG_TESTS:
        return LONG_TESTS[nodeid]
    return next((s for prefix, s in LONG_PREFIXES.items() if nodeid.startswith(prefix)), None)


def _workers(config: pytest.Config) -> int:
    try:
        count = int(config.getoption("numprocesses") or 0)
    except (ValueError, TypeError):  # "auto" / "logical": the count is not known here
        count = os.cpu_count() or 1
    return count


def balanced_order(nodeids: list[str], workers: int) -> list[int]:
    """The indexes of ``nodeids`` in run order: slices as worksteal cuts them, each
    beginning with its share of the long tests (longest first to the lightest slice)."""
    long = sorted((i for i, n in enumerate(nodeids) if _seconds(n) is not None),
                  key=lambda i: -(_seconds(nodeids[i]) or 0.0))
    if workers < 2 or not long:
        return list(range(len(nodeids)))
    bins: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in long:
        lightest = min(range(workers), key=lambda b: load[b])
        bins[lightest].append(i)
        load[lightest] += _seconds(nodeids[i]) or 0.0
    taken = set(long)
    rest = [i for i in range(len(nodeids)) if i not in taken]
    order: list[int] = []
    remaining = len(nodeids)
    for b in range(workers):
        # worksteal's first split: each idle worker gets len(pending) // workers_left
        size = remaining // (workers - b)
        fill = max(0, size - len(bins[b]))
        order += bins[b] + rest[:fill]
        rest = rest[fill:]
        remaining -= size
    return order + rest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = balanced_order([item.nodeid for item in items], _workers(config))
    items[:] = [items[i] for i in order]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, None, None]:
    # A store error from the server ("We encountered an internal error") says nothing of
    # why; the server's own log does, and it is gone with the session's temporary folder.
    outcome = yield
    report = outcome.get_result()
    server = getattr(item, "funcargs", {}).get("s3_server")
    if report.failed and server is not None and hasattr(server, "log"):
        from checkpoint_fixtures import log_tail

        report.sections.append(("S3 server (weed mini) log, last lines", log_tail(server)))
