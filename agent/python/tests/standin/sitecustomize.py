"""A "user" sitecustomize for the probe tests: the probe's own sitecustomize must chain
to it (it sets GPUMEM_TEST_CHAINED so tests can see that), and it swaps the memory
reader for the recording stand-in before torch is imported."""

import os

os.environ["GPUMEM_TEST_CHAINED"] = "1"

if os.environ.get("GPUMEM_TEST_READER") == "recording":
    import gpumem_probe
    from recording_reader import RecordingReader

    gpumem_probe._set_reader(RecordingReader())

    out = os.environ.get("GPUMEM_TEST_CALLS_OUT")
    if out:
        import atexit
        import json

        reader = gpumem_probe._PENDING_READER

        def _dump():
            with open(out, "w") as f:
                json.dump(reader.calls, f)

        atexit.register(_dump)
