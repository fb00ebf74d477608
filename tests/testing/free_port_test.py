#!/usr/bin/env python3
"""tests/testing/free_port.py: the ports it gives the scripts' servers lie below the kernel's
ephemeral range (where an outgoing connection could take them before the server binds) and are
free; where that range leaves no room, or everything below it is taken, the kernel's pick."""

import os
import socket
import subprocess
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import free_port  # noqa: E402


class FreePortTest(unittest.TestCase):
    def test_ports_are_free_and_below_the_ephemeral_range(self):
        below = free_port.ephemeral_low()
        self.assertGreaterEqual(below - free_port.LOWEST, 1000, "this machine's range is unusual")
        for _ in range(50):
            port = free_port.free_port("127.0.0.1")
            self.assertGreaterEqual(port, free_port.LOWEST)
            self.assertLess(port, below)
            with socket.socket() as server:
                server.bind(("127.0.0.1", port))

    def test_a_port_in_use_is_not_given(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", free_port.free_port("127.0.0.1")))
            taken.listen()
            busy = taken.getsockname()[1]
            other = free_port.free_port("127.0.0.1")
            picks = iter([busy, busy, other])
            with mock.patch.object(free_port.random, "randrange", lambda *_: next(picks)):
                self.assertEqual(free_port.free_port("127.0.0.1"), other)

    def test_too_little_room_falls_back_to_the_kernels_pick(self):
        port = free_port.free_port("127.0.0.1", below=free_port.LOWEST + 10)
        self.assertGreaterEqual(port, free_port.ephemeral_low())

    def test_the_scripts_helper_prints_such_a_port(self):
        helpers = os.path.join(HERE, "script_helpers.sh")
        out = subprocess.run(["bash", "-c", f"source '{helpers}'; free_port 127.0.0.1"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        self.assertLess(int(out), free_port.ephemeral_low())
        self.assertGreaterEqual(int(out), free_port.LOWEST)


if __name__ == "__main__":
    unittest.main()
