#!/usr/bin/env python3
"""ps-plan (deploy/plan/ps-plan): its memory and step arithmetic, its choices and its errors.
How its step times compare with measurements is bench/zone_cluster.sh's part (recorded in
bench/PERFORMANCE.md).

Usage: ps_plan_test.py SOURCE_DIR
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

PLAN = None
# ClientOptions::partition_bytes as worker/options.h sets it (ps-plan keeps its own copy).
CLIENT_PARTITION_BYTES = None


def client_partition_bytes(root):
    with open(os.path.join(root, "worker", "options.h")) as header:
        found = re.search(r"^\s*size_t partition_bytes = (\d+)(?: << (\d+))?;$", header.read(),
                          re.MULTILINE)
    assert found, "worker/options.h sets no partition_bytes default this test can read"
    return int(found.group(1)) << int(found.group(2) or 0)


def run(*args):
    return subprocess.run([sys.executable, PLAN, *args], capture_output=True, text=True,
                          timeout=60)


def plan_json(*args):
    out = run(*args, "--json")
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


class PsPlanTest(unittest.TestCase):
    def test_memory_per_shard_is_weights_gradients_and_state(self):
        # 1e9 parameters, Adam (2 slots): 16 bytes an element over 4 shards, plus 1 GiB.
        option = plan_json("--params", "1e9", "--optimizer", "adam", "--workers", "1",
                           "--shards", "4", "--shard_nic", "10")["options"][0]
        self.assertAlmostEqual(option["memory_per_shard_gib"],
                               round((1e9 / 4 * 16 + (1 << 30)) / (1 << 30), 2))
        # A backup of the neighbour's share doubles the tensors.
        doubled = plan_json("--params", "1e9", "--optimizer", "adam", "--workers", "1",
                            "--shards", "4", "--shard_nic", "10", "--replicas", "2")["options"][0]
        self.assertAlmostEqual(doubled["memory_per_shard_gib"],
                               round((1e9 / 4 * 32 + (1 << 30)) / (1 << 30), 2))

    def test_step_is_the_slower_link_plus_the_pipelines_two_ends(self):
        # 64 MiB of fp32, 2 workers and 2 shards at 1 Gbit/s, 1 MiB partitions: each link moves
        # 64 MiB each way (537 ms); the first partitions go up before any pull comes down, the
        # last come down after every push, each through a worker's link shared by 2 shards.
        option = plan_json("--params", str(16 << 20), "--workers", "2", "--worker_nic", "1",
                           "--shards", "2", "--shard_nic", "1",
                           "--partition_bytes", "1M")["options"][0]
        self.assertAlmostEqual(option["bound_ms"], round((64 << 20) * 8 / 1e9 * 1e3, 2))
        self.assertAlmostEqual(option["communication_ms"],
                               round(((64 << 20) * 8 / 1e9 + 2 * 2 * (1 << 20) * 8 / 1e9) * 1e3,
                                     2))
        # Slower shards bound the step, and say so; bf16 halves the bytes (a 1 MiB partition
        # of fp32 elements is 512 KiB on the wire), and a shard takes from both workers at once.
        slow = plan_json("--params", str(16 << 20), "--workers", "2", "--worker_nic", "1",
                         "--shards", "2", "--shard_nic", "0.5", "--partition_bytes", "1M",
                         "--wire", "bf16")["options"][0]
        self.assertEqual(slow["bound_by"], "shard NIC")
        self.assertAlmostEqual(slow["communication_ms"],
                               round((2 * (16 << 20) * 8 / 0.5e9 +
                                      2 * 2 * (512 << 10) * 8 / 0.5e9) * 1e3, 2))
        # One partition per shard: the pull waits for the whole push, so a push and then a pull.
        single = plan_json("--params", str(1 << 18), "--workers", "2", "--worker_nic", "1",
                           "--shards", "2", "--shard_nic", "1",
                           "--partition_bytes", "1M")["options"][0]
        self.assertEqual(single["partitions"], 1)
        self.assertAlmostEqual(single["communication_ms"],
                               round(2 * 2 * (1 << 20) * 8 / 1e9 * 1e3, 2))

    def test_a_round_trip_adds_to_the_step_and_its_bound(self):
        # The last pull's answer leaves its shard only after its push arrived: one round trip
        # more, on the step and on the bound alike (fixed 1 MiB partitions here).
        args = ["--params", str(16 << 20), "--workers", "2", "--worker_nic", "1", "--shards", "2",
                "--shard_nic", "1", "--partition_bytes", "1M"]
        flat = plan_json(*args)["options"][0]
        delayed = plan_json(*args, "--rtt_ms", "2")["options"][0]
        self.assertAlmostEqual(delayed["communication_ms"], flat["communication_ms"] + 2)
        self.assertAlmostEqual(delayed["bound_ms"], flat["bound_ms"] + 2)
        small = ["--params", str(1 << 10), "--workers", "1", "--shards", "1", "--shard_nic", "1"]
        self.assertAlmostEqual(plan_json(*small, "--rtt_ms", "1")["options"][0]["communication_ms"],
                               plan_json(*small)["options"][0]["communication_ms"] + 1, places=1)
        for bad in ("-1", "nan"):
            refused = run(*args, "--rtt_ms", bad)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("--rtt_ms", refused.stderr)

    def test_send_buffers_are_capped_where_workers_share_a_shard_link(self):
        def layout(workers, shards, worker_nic=1, shard_nic=1, rtt_ms=0, mib=16):
            return plan_json("--params", str(mib << 18), "--workers", str(workers),
                             "--worker_nic", str(worker_nic), "--shards", str(shards),
                             "--shard_nic", str(shard_nic), "--rtt_ms", str(rtt_ms))["options"][0]
        # Several workers per shard, whether its link is busier than a worker's (4 x 2, 2 x 1)
        # or as busy (2 x 2, any model): a millisecond of the link within a zone, 128 KiB at 1
        # Gbit/s, 64 KiB at 500 Mbit/s (the slower NIC's rate).
        for workers, shards, mib in ((4, 2, 16), (2, 1, 16), (2, 2, 16), (2, 2, 1)):
            self.assertEqual(layout(workers, shards, mib=mib)["tcp_send_buffer_bytes"], 128 << 10,
                             f"{workers} x {shards}, {mib} MiB")
        self.assertEqual(layout(4, 1, shard_nic=0.5)["tcp_send_buffer_bytes"], 64 << 10)
        # One worker shares no link with another: the kernel's autotuning.
        self.assertIsNone(layout(1, 2)["tcp_send_buffer_bytes"])
        self.assertIsNone(layout(1, 1)["tcp_send_buffer_bytes"])
        # A millisecond at 25 Gbit/s: 3.1 MB -> 4 MiB; four round trips where they are longer: a
        # 2 ms round trip at 1 Gbit/s, 1 MB -> 1 MiB.
        self.assertEqual(layout(8, 8, worker_nic=100, shard_nic=25)["tcp_send_buffer_bytes"],
                         4 << 20)
        self.assertEqual(layout(4, 2, rtt_ms=2)["tcp_send_buffer_bytes"], 1 << 20)
        text = run("--params", str(16 << 20), "--workers", "2", "--worker_nic", "1", "--shards",
                   "2", "--shard_nic", "1").stdout
        self.assertIn("sysctl net.ipv4.tcp_wmem='4096 16384 131072'", text)
        self.assertNotIn("tcp_wmem", run("--params", str(16 << 20), "--workers", "1",
                                         "--worker_nic", "1", "--shards", "2", "--shard_nic",
                                         "1").stdout)

    def test_auto_partitions_keep_the_pipelines_ends_small_but_not_below_half_a_millisecond(self):
        def zone(mib, nic=1):
            return plan_json("--params", str(mib << 18), "--workers", "2", "--worker_nic",
                             str(nic), "--shards", "2", "--shard_nic", str(nic))["options"][0]
        # 2 x 2 at 1 Gbit/s: the largest power of two whose two ends stay within 5% of the
        # bound (16 MiB: 128 KiB; 64 MiB: 512 KiB), but not one the link moves in under half
        # a millisecond (62.5 KB at 1 Gbit/s: 64 KiB for a 1 MiB model).
        for mib, partition in ((16, 128 << 10), (64, 512 << 10), (1, 64 << 10)):
            option = zone(mib)
            self.assertEqual(option["partition_bytes"], partition, mib)
            if mib > 1:
                self.assertLessEqual(option["communication_ms"], 1.05 * option["bound_ms"])
                twice = plan_json("--params", str(mib << 18), "--workers", "2", "--worker_nic",
                                  "1", "--shards", "2", "--shard_nic", "1", "--partition_bytes",
                                  str(2 * partition))["options"][0]
                self.assertGreater(twice["communication_ms"], 1.05 * twice["bound_ms"])
        # Fast links and a large model keep the client's default (ClientOptions, 512 KiB).
        self.assertEqual(zone(4096, nic=100)["partition_bytes"], CLIENT_PARTITION_BYTES)
        # The text names the recommendation.
        text = run("--params", str(16 << 18), "--workers", "2", "--worker_nic", "1",
                   "--shards", "2", "--shard_nic", "1").stdout
        self.assertIn("128K", text)
        self.assertNotEqual(run("--params", "1e6", "--workers", "1",
                                "--partition_bytes", "8").returncode, 0)

    def test_it_recommends_a_vm_that_holds_the_model_and_says_whether_gpus_wait(self):
        result = plan_json("--params", "7e9", "--optimizer", "adam", "--workers", "8",
                           "--step_ms", "2000", "--worker_nic", "100", "--gpu_hourly", "30")
        self.assertIsNotNone(result["recommended"])
        for option in result["options"]:
            self.assertTrue(option["fits"])
            self.assertLessEqual(option["memory_per_shard_gib"], 0.9 * option["vm_memory_gib"])
            self.assertEqual(option["gpus_hourly"], 240)
        fast = plan_json("--params", "7e9", "--workers", "8", "--step_ms", "10",
                         "--worker_nic", "100")
        self.assertTrue(all(option["gpus_wait"] for option in fast["options"]))
        text = run("--params", "7e9", "--workers", "8", "--step_ms", "2000").stdout
        self.assertIn("recommended:", text)

    def test_tensor_lists_and_mistakes(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("# name elements\nembedding 1000000\nfc.weight 4096\n\nfc.bias 64\n")
        try:
            result = plan_json("--tensors", f.name, "--workers", "1", "--shards", "1",
                               "--shard_nic", "10")
            self.assertEqual(result["plan"]["parameters"], 1000000 + 4096 + 64)
            self.assertEqual(result["plan"]["tensors"], 3)
            with open(f.name, "a") as more:
                more.write("broken line\n")
            bad = run("--tensors", f.name, "--workers", "1")
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn(":6: not a tensor size", bad.stderr)
        finally:
            os.unlink(f.name)
        huge = run("--params", "1e14", "--workers", "1")
        self.assertEqual(huge.returncode, 1)
        self.assertIn("no VM type on offer holds the model", huge.stdout)
        self.assertNotEqual(run("--params", "1e6", "--workers", "0").returncode, 0)
        self.assertNotEqual(run("--params", "1e6", "--workers", "1", "--shard_nic", "1").returncode,
                            0)


if __name__ == "__main__":
    ROOT = sys.argv.pop(1)
    PLAN = os.path.join(ROOT, "deploy", "plan", "ps-plan")
    CLIENT_PARTITION_BYTES = client_partition_bytes(ROOT)
    unittest.main()
