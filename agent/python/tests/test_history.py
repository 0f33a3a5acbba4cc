"""gpumem_history on snapshots shaped as torch.cuda.memory._snapshot() returns them
(the Snapshot TypedDict of torch/cuda/memory.py): the window's state rebuilt from the
segments, phases from the probe's metadata or from wall-clock marks, bounds kept."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gpumem_history as gh  # noqa: E402


def frame(file, line, name):
    return {"filename": file, "line": line, "name": name}


LINEAR = frame("/site-packages/torch/nn/modules/linear.py", 134, "forward")
CALL = frame("/site-packages/torch/nn/modules/module.py", 1786, "_call_impl")
MODEL = frame("/site-packages/transformers/models/llama/modeling_llama.py", 160, "forward")


def snapshot():
    # A weight allocated before recording began (only in the segments), an activation
    # and a temporary in the forward, the weight-sized gradient in the backward.
    return {
        "segments": [
            {
                "device": 0,
                "address": 1 << 30,
                "total_size": 20 << 20,
                "stream": 0,
                "segment_type": "large",
                "allocated_size": 8192,
                "active_size": 8192,
                "blocks": [
                    {"address": 1 << 30, "size": 4096, "requested_size": 4000, "state": "active_allocated", "frames": [MODEL]},
                    {"address": (1 << 30) + 4096, "size": 4096, "requested_size": 4096, "state": "active_allocated", "frames": []},
                    {"address": (1 << 30) + 8192, "size": (20 << 20) - 8192, "requested_size": 0, "state": "inactive", "frames": []},
                ],
            }
        ],
        "device_traces": [
            [
                {"action": "alloc", "addr": (1 << 30) + 8192, "size": 1024, "stream": 0, "time_us": 10,
                 "frames": [LINEAR, CALL, CALL, MODEL], "user_metadata": "gpumem:forward:0:model.layers.0"},
                {"action": "alloc", "addr": (1 << 30) + 9216, "size": 512, "stream": 0, "time_us": 11, "frames": [LINEAR]},
                {"action": "free_requested", "addr": (1 << 30) + 9216, "size": 512, "stream": 0, "time_us": 12, "frames": []},
                {"action": "free_completed", "addr": (1 << 30) + 9216, "size": 512, "stream": 0, "time_us": 12, "frames": []},
                {"action": "free_requested", "addr": (1 << 30) + 8192, "size": 1024, "stream": 0, "time_us": 30, "frames": []},
                {"action": "free_completed", "addr": (1 << 30) + 8192, "size": 1024, "stream": 0, "time_us": 30, "frames": []},
                {"action": "alloc", "addr": (1 << 30) + 4096, "size": 4096, "stream": 0, "time_us": 31, "frames": [],
                 "user_metadata": "gpumem:backward:0"},
            ]
        ],
    }


class FromSnapshot(unittest.TestCase):
    def test_state_before_the_window_and_phases(self):
        doc = gh.from_snapshot(snapshot(), source="cuda", device=0, marks=[(11, 12, "forward", 0)])
        self.assertEqual(doc["schema"], gh.SCHEMA)
        # The weight only the segments know of is a block from before the window; the
        # gradient, allocated in the window, is not.
        [weight] = doc["before"]
        self.assertEqual((weight["address"], weight["size"]), (1 << 30, 4000))
        self.assertEqual([doc["frames"][i]["line"] for i in doc["stacks"][weight["stack"]]], [160])
        self.assertEqual(doc["reserved_before_bytes"], 20 << 20)
        # free_completed is the free (free_requested left out): 5 events.
        self.assertEqual([e["action"] for e in doc["events"]], ["alloc", "alloc", "free", "free", "alloc"])
        names = [(p["name"], p["step"]) for p in doc["phases"]]
        self.assertEqual(names, [("forward", 0), ("backward", 0)])
        self.assertEqual(doc["scopes"], ["model.layers.0"])
        first = doc["events"][0]
        self.assertEqual((first["phase"], first["scope"]), (0, 0))
        # The untagged temporary falls in the forward's wall-clock mark.
        self.assertEqual(doc["events"][1]["phase"], 0)
        # The module-call plumbing is left out of the stack.
        files = [doc["frames"][i]["name"] for i in doc["stacks"][first["stack"]]]
        self.assertEqual(files, ["forward", "forward"])

    def test_free_requested_when_completions_were_skipped(self):
        snap = snapshot()
        snap["device_traces"][0] = [e for e in snap["device_traces"][0] if e["action"] != "free_completed"]
        doc = gh.from_snapshot(snap, source="cuda", device=0)
        self.assertEqual([e["action"] for e in doc["events"]].count("free"), 2)

    def test_the_last_events_are_kept(self):
        doc = gh.from_snapshot(snapshot(), source="cuda", device=0, max_events=2)
        self.assertEqual(doc["dropped_events"], 5)
        self.assertEqual(len(doc["events"]), 2)
        # The activation's free without its alloc: a block from before the window.
        self.assertIn((1 << 30) + 8192, [b["address"] for b in doc["before"]])

    def test_deep_stacks_and_long_names_are_bounded(self):
        snap = snapshot()
        deep = [frame("/site-packages/torch/x.py", i, "f") for i in range(50)]
        deep += [frame("/user/train.py", i, "g" * 1000) for i in range(50)]
        snap["device_traces"][0][0]["frames"] = deep
        doc = gh.from_snapshot(snap, source="cuda", device=0)
        stack = doc["stacks"][doc["events"][0]["stack"]]
        self.assertEqual(len(stack), gh.MAX_STACK_DEPTH)
        kept = [doc["frames"][i] for i in stack]
        self.assertEqual(sum("/torch/" in f["file"] for f in kept), 3)
        self.assertTrue(all(len(f["name"]) <= gh.MAX_NAME_CHARS for f in kept))

    def test_the_byte_cap_keeps_the_last_events_that_fit(self):
        import json

        snap = snapshot()
        many = [
            {"action": "alloc", "addr": (2 << 30) + 512 * i, "size": 512, "stream": 0, "time_us": 100 + i,
             "frames": [frame("/user/train.py", i, "step")], "user_metadata": "gpumem:forward:1"}
            for i in range(5000)
        ]
        snap["device_traces"][0] = snap["device_traces"][0] + many
        whole = gh.from_snapshot(snap, source="cuda", device=0)
        self.assertGreater(len(json.dumps(whole, separators=(",", ":"))), 200000)
        doc = gh.from_snapshot(snap, source="cuda", device=0, max_bytes=200000)
        self.assertLessEqual(len(json.dumps(doc, separators=(",", ":"))), 200000)
        self.assertGreater(doc["dropped_events"], 0)
        # Counted as the recorder's entries: the events kept are what remains of them.
        self.assertLessEqual(doc["dropped_events"] + len(doc["events"]), len(snap["device_traces"][0]))
        # The newest events are the ones kept.
        last = lambda d: {k: d["events"][-1][k] for k in ("action", "address", "size")}  # noqa: E731
        self.assertEqual(last(doc), last(whole))
        self.assertTrue(any("within 200000 bytes" in n for n in doc["notes"]), doc["notes"])


if __name__ == "__main__":
    unittest.main()
