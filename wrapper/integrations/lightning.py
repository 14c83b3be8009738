"""``ReschedCallback`` for PyTorch Lightning (optional; never required).

    from wrapper.integrations.lightning import ReschedCallback
    trainer = L.Trainer(..., callbacks=[ModelCheckpoint(...), ReschedCallback()])

Per step: heartbeat and ``resched-train: step N`` (Lightning's bar prints nothing line
by line when stdout is no terminal). On a stop signal (TERM, USR1): saves ``last.ckpt``
(what ``fit(ckpt_path="last")`` loads) in the checkpoint callback's folder at the step
boundary and stops. At the end of a fit that reached ``max_steps``: the finish line and
the finished flag. ``lightning`` is imported when the callback is created.
"""

from __future__ import annotations

import os
from typing import Any

from wrapper.integrations.common import StopRequest, say_finished, say_saved, say_step


def ReschedCallback() -> Any:  # noqa: N802 - a class factory, named like the class it makes
    import lightning.pytorch as pl

    class _ReschedCallback(pl.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.stop: StopRequest | None = None
            self.saved_at: int | None = None

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.stop = StopRequest()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            say_step(trainer.global_step)
            if self.stop is not None and self.stop.requested and not trainer.should_stop:
                self._save(trainer)
                trainer.should_stop = True

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            # Lightning's own SIGTERM handler (installed after on_fit_start, calling ours
            # too) ends the fit with SIGTERMException at the step boundary, before the
            # next on_train_batch_end: save there, the step is whole.
            if type(exception).__name__ == "SIGTERMException" or (
                    self.stop is not None and self.stop.requested):
                self._save(trainer)

        def _save(self, trainer: Any) -> None:
            if self.saved_at == trainer.global_step:
                return
            folder = _checkpoint_dir(trainer)
            if folder is not None:
                trainer.save_checkpoint(os.path.join(folder, "last.ckpt"))
                self.saved_at = trainer.global_step
                say_saved(trainer.global_step)

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            if self.stop is not None:
                self.stop.close()
            if trainer.max_steps and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
                say_finished(trainer.global_step)

    return _ReschedCallback()


def _checkpoint_dir(trainer: Any) -> str | None:
    callback = getattr(trainer, "checkpoint_callback", None)
    folder = getattr(callback, "dirpath", None)
    return str(folder) if folder else None
