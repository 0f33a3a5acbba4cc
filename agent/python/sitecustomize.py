"""The `sitecustomize` that `gpumem-agent run` puts first on the child's PYTHONPATH.

It first runs the `sitecustomize` that would have run without us, then arms
gpumem_probe's import hook; the probe stays idle until `torch` is imported and does
nothing at all outside `gpumem-agent run`. Nothing here may break the user's program, so
every failure is reported on stderr and swallowed.

The one chained is the first `sitecustomize` on sys.path that is not one of these: a
`gpumem-agent run` inside another (or a process left by an earlier run) has several of
these folders on its PYTHONPATH, and each is skipped, so the user's own runs exactly
once and no two of these call each other.
"""

import importlib.machinery
import importlib.util
import os
import sys

#: Marks this file: a `sitecustomize` holding this line is never chained.
_GPUMEM_CHAINING_SITECUSTOMIZE = True
_MARK = b"_GPUMEM_CHAINING_SITECUSTOMIZE = True"
_CHAINED = "_gpumem_chained_sitecustomize"


def _is_ours(origin):
    try:
        with open(origin, "rb") as f:
            return _MARK in f.read(1 << 16)
    except OSError:
        return False


def _chain():
    if _CHAINED in sys.modules:
        return
    for entry in list(sys.path):
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry or os.getcwd()])
        if spec is None or spec.loader is None:
            continue
        if spec.origin and _is_ours(spec.origin):
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[_CHAINED] = module
        spec.loader.exec_module(module)
        return


try:
    _chain()
except Exception as e:  # noqa: BLE001 - as site.py does for a failing sitecustomize
    sys.stderr.write("Error in the chained sitecustomize: %s: %s\n" % (type(e).__name__, e))

try:
    import gpumem_probe

    gpumem_probe._activate_from_env()
except Exception as e:  # noqa: BLE001 - never break the user's program
    sys.stderr.write("gpumem_probe: disabled (%s: %s)\n" % (type(e).__name__, e))
