"""Optional integrations: small additions to a training that resched never requires.

Each adds what the framework alone does not say: a heartbeat per step (the hang detector
sees progress, not only output), the exact step on stdout (``resched-train: step N``,
which :mod:`wrapper.progress_lines` reads), a save when the stop signal comes, and the
finished flag at the end (``FAULT_TOL_FINISHED_FLAG_FILE``, set by ``resched wrap
--expect-finished-flag``). They work without ``resched wrap`` too (then heartbeat and
flag do nothing) and import their framework only when used.

- :mod:`.hf`: ``ReschedCallback`` for ``transformers.Trainer``;
- :mod:`.lightning`: ``ReschedCallback`` for ``lightning.pytorch.Trainer``;
- :mod:`.loop`: ``LoopProgress`` for a plain training loop.
"""
