"""The `sitecustomize` that `gpumem-agent run` puts first on the child's PYTHONPATH.

It first runs the `sitecustomize` that would have run without us (the next one on
sys.path), then arms gpumem_probe's import hook; the probe stays idle until `torch` is
imported and does nothing at all outside `gpumem-agent run`. Nothing here may break the
user's program, so every failure is reported on stderr and swallowed.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_gpumem_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as e:  # noqa: BLE001 - as site.py does for a failing sitecustomize
    sys.stderr.write("Error in the chained sitecustomize: %s: %s\n" % (type(e).__name__, e))

try:
    import gpumem_probe

    gpumem_probe._activate_from_env()
except Exception as e:  # noqa: BLE001 - never break the user's program
    sys.stderr.write("gpumem_probe: disabled (%s: %s)\n" % (type(e).__name__, e))
