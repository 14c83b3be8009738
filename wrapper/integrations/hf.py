"""``ReschedCallback`` for the Hugging Face ``Trainer`` (optional; never required).

    from wrapper.integrations.hf import ReschedCallback
    trainer = Trainer(..., callbacks=[ReschedCallback()])

Per step: heartbeat and ``resched-train: step N``. On a stop signal (TERM, USR1): the
Trainer saves at the end of the current step and stops (``control.should_save`` /
``should_training_stop``). After a save: ``resched-train: checkpoint step N``. At the
end of a training that reached ``max_steps``: the finish line and the finished flag.
``transformers`` is imported when the callback is created, not with this module.
"""

from __future__ import annotations

from typing import Any

from wrapper.integrations.common import StopRequest, say_finished, say_saved, say_step


def ReschedCallback() -> Any:  # noqa: N802 - a class factory, named like the class it makes
    from transformers import TrainerCallback

    class _ReschedCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.stop = StopRequest()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            say_step(state.global_step)
            if self.stop.requested:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            say_saved(state.global_step)
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.stop.close()
            if state.max_steps and state.global_step >= state.max_steps:
                say_finished(state.global_step)
            return control

    return _ReschedCallback()
