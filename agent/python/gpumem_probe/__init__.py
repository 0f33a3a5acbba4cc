"""gpumem_probe: mark phases of your own script for ``gpumem-agent run``.

    import gpumem_probe

    with gpumem_probe.phase("eval"):
        evaluate(model)

Outside ``gpumem-agent run`` every call is a no-op, so the import can stay in code
that also runs without the agent.

PLACEHOLDER: the ``run`` branch supplies the real probe at this same path (the file
that ``gpumem-agent run`` injects and the wheel installs: one source, not two copies).
This stand-in only keeps the packaging and its tests working until that merge.
"""

import contextlib

__all__ = ["phase"]


@contextlib.contextmanager
def phase(name):
    """Mark the block as the phase ``name``; a no-op outside ``gpumem-agent run``."""
    del name
    yield
