"""The probes' watchdog (`gpumem_trace.py`, `gpumem_count.py`): the agent writes this
file beside the probe it runs, into the same private folder."""

import os
import threading
import time


def watchdog(deadline_s, parent_pid):
    """Ends this process at its deadline, or as soon as the agent that started it is
    gone (re-parented: its parent pid changes), whatever the probe is doing: a probe
    never outlives its agent, even where the kernel's parent-death signal is missing."""
    started = time.monotonic()

    def watch():
        while True:
            time.sleep(0.25)
            if deadline_s is not None and time.monotonic() - started > deadline_s:
                os._exit(124)
            if parent_pid is not None and os.getppid() != parent_pid:
                os._exit(125)

    threading.Thread(target=watch, name="gpumem-watchdog", daemon=True).start()
