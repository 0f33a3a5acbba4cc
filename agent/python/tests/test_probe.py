"""The probe against real PyTorch on CPU, with the memory reader replaced by the
recording stand-in (tests/standin). Each workload runs as a child process connected to a
small in-test agent (a unix socket collecting the JSON lines), exactly as under
`gpumem-agent run`. The counters are SYNTHETIC; what is checked is the phase detection,
the call order of method §7, the facts and the failure records.

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_ROOT = os.path.dirname(HERE)
STANDIN = os.path.join(HERE, "standin")
WORKLOADS = os.path.join(HERE, "workloads")

sys.path.insert(0, HERE)
import schema_check  # noqa: E402

SCHEMA = schema_check.load()


class FakeAgent:
    """Accepts every connection on a unix socket and keeps each one's parsed lines."""

    def __init__(self, folder):
        self.path = os.path.join(folder, "probe.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.connections = []
        self.invalid = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        readers = []
        while not self.stop:
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
            msgs = []
            self.connections.append(msgs)
            t = threading.Thread(target=self._read, args=(conn, msgs), daemon=True)
            t.start()
            readers.append(t)
        for t in readers:
            t.join(5)

    def _read(self, conn, msgs):
        with conn, conn.makefile("rb") as f:
            for line in f:
                message = json.loads(line)
                # Every message the probe sends must match the agent's schema.
                try:
                    schema_check.check_message(message, SCHEMA)
                except AssertionError as e:
                    self.invalid.append(str(e))
                msgs.append(message)

    def close(self):
        self.stop = True
        self.thread.join(10)
        self.server.close()


def run_workload(name, extra_env=None, reader="recording", files=None):
    """Runs a workload under the probe; returns (returncode, messages, calls, stdout, stderr).
    ``files``: a dict that receives the probe folder's ``history-*`` files (name ->
    (mode, bytes)) before the folder goes."""
    with tempfile.TemporaryDirectory() as folder:
        agent = FakeAgent(folder)
        calls_out = os.path.join(folder, "calls.json")
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join([PROBE_ROOT, STANDIN]),
            GPUMEM_PROBE_SOCKET=agent.path,
            GPUMEM_TEST_READER=reader,
            GPUMEM_TEST_CALLS_OUT=calls_out,
        )
        env.update(extra_env or {})
        proc = subprocess.run(
            [sys.executable, os.path.join(WORKLOADS, name)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        time.sleep(0.3)
        agent.close()
        if agent.invalid:
            raise AssertionError("messages outside schemas/probe.v1.schema.json: %s" % agent.invalid)
        calls = None
        if os.path.exists(calls_out):
            with open(calls_out) as f:
                calls = json.load(f)
        msgs = [m for c in agent.connections for m in c]
        if files is not None:
            for name in os.listdir(folder):
                if name.startswith("history-"):
                    path = os.path.join(folder, name)
                    with open(path, "rb") as f:
                        files[name] = (os.stat(path).st_mode & 0o777, f.read())
        return proc.returncode, msgs, calls, proc.stdout, proc.stderr


def phases(msgs):
    return [(m["name"], m["step"]) for m in msgs if m["type"] == "phase"]


def one(msgs, kind):
    found = [m for m in msgs if m["type"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


class TrainingLoop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rc, cls.msgs, cls.calls, cls.out, cls.err = run_workload("train_adamw.py")

    def test_runs_and_every_message_is_versioned(self):
        self.assertEqual(self.rc, 0, self.err)
        self.assertIn("trained True", self.out)
        self.assertTrue(all(m["v"] == 1 for m in self.msgs))

    def test_phases_of_the_first_three_steps_then_hooks_removed(self):
        expected = [("model_load", None)]
        for step in range(3):
            expected += [("forward", step), ("backward", step), ("optimizer_step", step)]
        self.assertEqual(phases(self.msgs), expected)
        first = [m for m in self.msgs if m["type"] == "phase" and m["first_step"]]
        self.assertEqual([m["name"] for m in first], ["forward", "backward", "optimizer_step"])
        removed = one(self.msgs, "hooks_removed")
        self.assertEqual(removed["steps"], 3)
        bye = one(self.msgs, "bye")
        self.assertEqual(bye["steps"], 3)  # steps 4 and 5 ran unobserved
        self.assertGreater(bye["overhead_ns"], 0)
        self.assertGreater(bye["instrumented_ns"], bye["overhead_ns"])

    def test_hello_names_the_stand_in_and_the_backend(self):
        hello = one(self.msgs, "hello")
        self.assertEqual(hello["reader"], "recording-standin")
        self.assertEqual(hello["torch_version"].split("+")[0], __import__("torch").__version__.split("+")[0])
        self.assertIn(hello["backend"], ("cuda", "rocm", "none"))

    def test_model_and_optimizer_facts(self):
        model = one(self.msgs, "model")
        width, depth = 64, 3
        params = depth * (width * width + width) + width + 1
        self.assertEqual(model["parameters_by_dtype"], {"float32": {"count": params, "bytes": 4 * params}})
        self.assertEqual(model["buffers_by_dtype"], {"float32": {"count": width, "bytes": 4 * width}})
        self.assertEqual(model["trainable_parameters"], params)
        self.assertEqual(model["input_shapes"], [{"shape": [8, 64], "dtype": "float32"}])
        opt = one(self.msgs, "optimizer")
        self.assertEqual(opt["optimizer_class"], "AdamW")
        self.assertEqual(opt["parameters_covered"], params)
        # AdamW keeps exp_avg and exp_avg_sq (fp32) per parameter plus a step scalar each.
        self.assertGreaterEqual(opt["state_bytes"], 2 * 4 * params)
        self.assertLess(opt["state_bytes"], 2 * 4 * params + 64 * 16)

    def test_section_7_order_for_every_phase(self):
        # Every phase: synchronize, current, reset_peaks, tag ... synchronize, peaks,
        # current, device_memory, device, tag (the reader's own order, recorded).
        begin = ["synchronize", "current", "reset_peaks", "tag"]
        end = ["synchronize", "peaks", "current", "device_memory", "tag"]
        calls = list(self.calls)
        n = len(phases(self.msgs))
        self.assertEqual(calls, (begin + end) * n)


class GenerationLoop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rc, cls.msgs, _, cls.out, cls.err = run_workload("generate_kv.py")

    def test_prefill_and_decode_per_generate_call(self):
        self.assertEqual(self.rc, 0, self.err)
        self.assertEqual(
            phases(self.msgs),
            [("model_load", None), ("prefill", 0), ("decode", 0), ("prefill", 1), ("decode", 1)],
        )

    def test_generation_facts_and_kv_cache_seen(self):
        gens = [m for m in self.msgs if m["type"] == "generation"]
        self.assertEqual(len(gens), 2)
        # batch 2, prompt 10, 16 new tokens: 1 prefill + 15 decode forwards.
        layers, batch, tokens, dim = 2, 2, 10 + 15, 32
        for g in gens:
            self.assertEqual(g["forwards"], 16)
            self.assertEqual(g["output_shape"], [2, 26])
            self.assertEqual(g["kv_tensors"], 2 * layers)
            self.assertEqual(g["kv_bytes"], 2 * layers * batch * tokens * dim * 4)
        model = one(self.msgs, "model")
        self.assertEqual(model["input_shapes"], [{"shape": [2, 10], "dtype": "int64"}])
        self.assertEqual(model["config"]["num_hidden_layers"], 2)
        self.assertEqual(model["config"]["num_key_value_heads"], 4)


class MarkersAndFailures(unittest.TestCase):
    def test_manual_markers(self):
        rc, msgs, _, out, err = run_workload("markers.py")
        self.assertEqual(rc, 0, err)
        self.assertEqual(phases(msgs), [("model_load", None), ("eval", 0), ("export", 0)])
        self.assertTrue(all(m["manual"] for m in msgs if m["type"] == "phase" and m["name"] != "model_load"))

    def test_markers_are_a_no_op_without_the_agent(self):
        env = dict(os.environ, PYTHONPATH=PROBE_ROOT)
        env.pop("GPUMEM_PROBE_SOCKET", None)
        proc = subprocess.run(
            [sys.executable, os.path.join(WORKLOADS, "markers.py")], env=env, capture_output=True, text=True
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("markers 2", proc.stdout)
        self.assertEqual(proc.stderr, "")

    def test_out_of_memory_is_recorded_with_its_phase(self):
        rc, msgs, _, _, err = run_workload("oom.py")
        self.assertEqual(rc, 1)
        self.assertIn("OutOfMemoryError", err)  # the user's traceback still prints
        failure = one(msgs, "failure")
        self.assertEqual(failure["kind"], "oom")
        self.assertEqual(failure["phase"], "forward")
        self.assertIn("Tried to allocate 20.00 MiB", failure["message"])
        forward = [m for m in msgs if m["type"] == "phase" and m["name"] == "forward"]
        self.assertEqual(len(forward), 1)
        self.assertIn("OutOfMemoryError", forward[0]["error"])

    def test_crash_is_recorded_as_an_exception(self):
        rc, msgs, _, _, err = run_workload("crash.py")
        self.assertEqual(rc, 1)
        failure = one(msgs, "failure")
        self.assertEqual(failure["kind"], "exception")
        self.assertEqual(failure["phase"], "export")
        self.assertEqual(failure["exception_type"], "ValueError")
        self.assertEqual(
            phases(msgs)[:4], [("model_load", None), ("forward", 0), ("backward", 0), ("optimizer_step", 0)]
        )

    def test_a_program_without_torch_never_connects_and_the_chain_runs(self):
        rc, msgs, _, out, err = run_workload("no_torch.py")
        self.assertEqual(rc, 0, err)
        self.assertEqual(msgs, [])
        self.assertIn("chained 1", out)

    def test_the_real_reader_reads_nothing_without_cuda(self):
        # The shipped torch.cuda reader on a machine without a GPU: no number at all.
        rc, msgs, _, _, err = run_workload("train_adamw.py", reader="real")
        self.assertEqual(rc, 0, err)
        self.assertEqual(one(msgs, "hello")["reader"], "torch.cuda")
        for m in msgs:
            if m["type"] == "phase":
                for key in ("allocated_start_bytes", "allocated_peak_bytes", "reserved_end_bytes"):
                    self.assertIsNone(m[key])


HISTORY_ENV = {"GPUMEM_PROBE_HISTORY_ENTRIES": "200000", "GPUMEM_PROBE_HISTORY_BYTES": str(8 << 20)}


class MemoryHistory(unittest.TestCase):
    """`run --memory-history` in the probe: the recorder's API driven by the phases, the
    events taken out after each phase, the snapshot and its conversion written as new
    private files, and PyTorch's own viewer reading the snapshot. The recorder here is
    the stand-in's SYNTHETIC plan (no CUDA on this machine); the real reader says why
    it cannot record."""

    @classmethod
    def setUpClass(cls):
        cls.files = {}
        cls.rc, cls.msgs, cls.calls, _, cls.err = run_workload("train_adamw.py", HISTORY_ENV, files=cls.files)

    def test_the_history_is_recorded_after_every_phase_and_written_private(self):
        self.assertEqual(self.rc, 0, self.err)
        said = one(self.msgs, "memory_history")
        self.assertEqual(said["status"], "recorded", said)
        # One snapshot after each of the 10 phases (model_load, 3 steps of 3), one at the end.
        self.assertEqual(said["snapshots"], len(phases(self.msgs)) + 1)
        pid = one(self.msgs, "hello")["pid"]
        self.assertEqual(sorted(self.files), ["history-%d.json" % pid, "history-%d.pickle" % pid])
        for mode, _ in self.files.values():
            self.assertEqual(mode, 0o600)
        # The history is written once, after the hooks are removed (3 steps).
        kinds = [m["type"] for m in self.msgs]
        self.assertLess(kinds.index("hooks_removed"), kinds.index("memory_history"))

    def test_the_conversion_carries_the_phases_and_the_stand_ins_plan(self):
        pid = one(self.msgs, "hello")["pid"]
        doc = json.loads(self.files["history-%d.json" % pid][1])
        self.assertEqual(doc["schema"], "gpumem.history/v1")
        self.assertEqual(doc["source"], "synthetic")
        named = [(p["name"], p["step"]) for p in doc["phases"]]
        self.assertEqual(named, phases(self.msgs))
        self.assertEqual(doc["scopes"], ["model.layers.0", "model.layers.1"])
        allocs = [e for e in doc["events"] if e["action"] == "alloc"]
        # Weights 4, gradients 4 and optimizer state 8 once; 2 activations and a
        # temporary per forward; a temporary in every other phase.
        self.assertEqual(len(allocs), 4 + 4 + 8 + 3 * (2 + 1) + 3 * 2)
        self.assertEqual(doc["dropped_events"], 0)

    def test_pytorchs_own_viewer_reads_the_snapshot(self):
        import pickle

        from torch.cuda import _memory_viz as viz

        pid = one(self.msgs, "hello")["pid"]
        snap = pickle.loads(self.files["history-%d.pickle" % pid][1])
        self.assertEqual(set(snap), {"segments", "device_traces"})
        text = viz.trace(snap)
        self.assertIn("TOTAL MEM", text)
        allocs = sum(len(t) for t in snap["device_traces"])
        self.assertIn("%d entries" % allocs, text)
        summary = viz.segsum(snap)
        # What is live at the end: weights, gradients and optimizer state of the plan.
        self.assertIn("total_allocated: %.1fMiB" % (4 * 4 + 4 * 4 + 8 * 4), summary)
        self.assertGreater(len(viz.trace_plot(snap)), 1000)
        self.assertGreater(len(viz.segment_plot(snap)), 1000)

    def test_the_recorders_bound_drops_the_oldest_and_counts_them(self):
        files = {}
        env = dict(HISTORY_ENV, GPUMEM_PROBE_HISTORY_ENTRIES="12")
        rc, msgs, _, _, err = run_workload("train_adamw.py", env, files=files)
        self.assertEqual(rc, 0, err)
        said = one(msgs, "memory_history")
        self.assertGreater(said["dropped"], 0)
        pid = one(msgs, "hello")["pid"]
        doc = json.loads(files["history-%d.json" % pid][1])
        self.assertLessEqual(len(doc["events"]), 12)
        self.assertEqual(doc["dropped_events"], said["dropped"])
        # What the window did not see allocated is rebuilt from the segments.
        self.assertGreater(len(doc["before"]), 0)

    def test_without_cuda_the_real_reader_says_why_and_writes_nothing(self):
        files = {}
        rc, msgs, _, _, err = run_workload("train_adamw.py", HISTORY_ENV, reader="real", files=files)
        self.assertEqual(rc, 0, err)
        said = one(msgs, "memory_history")
        self.assertEqual(said["status"], "not_possible")
        self.assertIn("torch.cuda is not available", said["detail"])
        self.assertEqual(files, {})
        # The phases are still recorded, with no number at all.
        self.assertEqual(len(phases(msgs)), 10)

    def test_without_the_flag_nothing_is_recorded(self):
        self.assertEqual([m for m in run_workload("markers.py")[1] if m["type"] == "memory_history"], [])


class Overhead(unittest.TestCase):
    def test_overhead_is_reported(self):
        # The probe's own accounting (time inside its hooks) for 3 instrumented steps.
        _, msgs, _, _, _ = run_workload("train_adamw.py", {"STEPS": "3"})
        bye = one(msgs, "bye")
        per_call = bye["overhead_ns"] / max(1, bye["hook_calls"])
        sys.stderr.write(
            "\n[probe overhead] %d hook calls, %.3f ms inside the probe over %.3f ms instrumented "
            "(%.1f µs per call; CPU, recording stand-in)\n"
            % (bye["hook_calls"], bye["overhead_ns"] / 1e6, bye["instrumented_ns"] / 1e6, per_call / 1e3)
        )
        self.assertLess(per_call, 5e6)


if __name__ == "__main__":
    unittest.main()


class SchemaCheck(unittest.TestCase):
    """The validator the tests above run on every message refuses what the agent would
    not read."""

    def test_an_unknown_field_a_missing_one_and_a_wrong_type_fail(self):
        ok = {"v": 1, "type": "bye", "overhead_ns": 1, "hook_calls": 2, "instrumented_ns": 3}
        schema_check.check_message(ok, SCHEMA)
        for bad in (
            dict(ok, dropped_by_the_agent=1),
            {k: v for k, v in ok.items() if k != "hook_calls"},
            dict(ok, hook_calls="2"),
            dict(ok, type="no_such_message"),
            {k: v for k, v in ok.items() if k != "v"},
        ):
            with self.assertRaises(AssertionError):
                schema_check.check_message(bad, SCHEMA)

    def test_the_limits_are_the_schemas(self):
        sys.path.insert(0, PROBE_ROOT)
        import gpumem_probe

        limits = SCHEMA["x-limits"]
        self.assertEqual(gpumem_probe.PROTOCOL_VERSION, limits["protocol_version"])
        self.assertEqual(gpumem_probe.MAX_LINE_BYTES, limits["max_line_bytes"])
        self.assertEqual(gpumem_probe.MAX_MESSAGES, limits["max_messages"])


class DistributedFacts(unittest.TestCase):
    """The rank's job as the probe reads it from the wrapper of the first forward:
    DeepSpeed's engine (its ZeRO stage), FSDP1's sharding strategy, DDP; none when the
    process runs no job. (The launched jobs themselves run in agent/tests/run_cli.rs.)"""

    def setUp(self):
        sys.path.insert(0, PROBE_ROOT)
        import torch

        import gpumem_probe

        self.torch, self.probe = torch, gpumem_probe
        self.env = dict(os.environ)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)

    def facts(self, module, world="4", local="2"):
        os.environ["WORLD_SIZE"] = world
        os.environ["LOCAL_WORLD_SIZE"] = local
        return self.probe._distributed_facts(self.torch, module)

    def test_a_deepspeed_engine_names_its_zero_stage(self):
        class DeepSpeedEngine(self.torch.nn.Module):
            def zero_optimization_stage(self):
                return 3

        f = self.facts(DeepSpeedEngine())
        self.assertEqual((f["wrapper"], f["sharding"]), ("deepspeed", "3"))
        self.assertEqual((f["world_size"], f["local_world_size"]), (4, 2))

    def test_fsdp1_names_its_sharding_strategy(self):
        class FullyShardedDataParallel(self.torch.nn.Module):
            sharding_strategy = "ShardingStrategy.SHARD_GRAD_OP"

        f = self.facts(FullyShardedDataParallel())
        self.assertEqual((f["wrapper"], f["sharding"]), ("fsdp1", "grad-op"))

    def test_a_plain_module_in_a_job_is_unwrapped_and_one_process_is_no_job(self):
        f = self.facts(self.torch.nn.Linear(2, 2))
        self.assertEqual((f["wrapper"], f["sharding"]), ("none", None))
        del os.environ["WORLD_SIZE"]
        self.assertIsNone(self.probe._distributed_facts(self.torch, self.torch.nn.Linear(2, 2)))

    def test_a_shard_is_what_the_rank_holds(self):
        t = self.torch.zeros(8)

        class Shard:
            _local_tensor = t

        class ZeroThree:
            _local_tensor = None
            ds_tensor = t[:2]

        self.assertIs(self.probe._local(Shard()), t)
        self.assertEqual(self.probe._local(ZeroThree()).numel(), 2)
