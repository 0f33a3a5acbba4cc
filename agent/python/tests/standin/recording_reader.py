"""The recording stand-in for the probe's memory reader (tests only, on CPU).

It records every call so tests can check the order of method §7 (synchronise → current →
reset peaks … synchronise → peaks → current → device memory) and returns SYNTHETIC,
deterministic counters: they are not memory of anything and must never be read as GPU
figures (the probe reports its reader as "recording-standin", and the agent then labels
the whole result SYNTHETIC).
"""

MIB = 1 << 20


class RecordingReader:
    kind = "recording-standin"

    def __init__(self):
        self.calls = []
        self.tick = 0

    def _note(self, name):
        if len(self.calls) < 100000:
            self.calls.append(name)

    def device(self):
        return None

    def synchronize(self):
        self._note("synchronize")

    def current(self):
        self._note("current")
        self.tick += 1
        return self.tick * MIB, self.tick * 2 * MIB

    def reset_peaks(self):
        self._note("reset_peaks")

    def peaks(self):
        self._note("peaks")
        return (self.tick + 1) * MIB, (self.tick + 1) * 2 * MIB

    def device_memory(self):
        self._note("device_memory")
        return None, None

    def tag(self, text):
        self._note("tag")
