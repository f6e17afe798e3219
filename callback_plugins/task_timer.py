"""Per-task wall-clock timing, printed after each task and as a top-10 summary at the end."""
from __future__ import annotations

import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_timer
type: aggregate
short_description: print how long each task took
description:
  - Prints the wall time of every task when it finishes and the ten slowest tasks at the end of the play run.
  - ansible-core ships no timing callback (profile_tasks lives in ansible.posix, which is not installed here).
requirements:
  - enable in ansible.cfg with C(callbacks_enabled = task_timer)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._current = None
        self._started = 0.0
        self._times: list[tuple[float, str]] = []
        self._run_started = time.monotonic()

    def _close(self):
        if self._current is not None:
            elapsed = time.monotonic() - self._started
            self._times.append((elapsed, self._current))
            self._display.display(f"  (previous task: {elapsed:0.2f}s; play run so far: {time.monotonic() - self._run_started:0.1f}s)",
                                  color="dark gray")
            self._current = None

    def _open(self, task):
        self._close()
        self._current = task.get_name()
        self._started = time.monotonic()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._open(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._open(task)

    def v2_playbook_on_stats(self, stats):
        self._close()
        if not self._times:
            return
        self._display.banner("TASK TIMES (slowest 10)")
        for elapsed, name in sorted(self._times, reverse=True)[:10]:
            self._display.display(f"{elapsed:8.2f}s  {name}")
