#!/usr/bin/env python3
"""A TCP port that a test hands to a server it is about to start.

The kernel's pick for port 0 comes from net.ipv4.ip_local_port_range, the range it also gives
every outgoing connection: between the pick and the server's bind, any process's connection can
take it ("Address already in use"). A port below that range is taken only by servers that name
it, so this picks one at random there that is free now (tests/testing/ports.h's StablePort for
the C++ tests, which also reserves it; a script's servers bind at once, so this does not).

    free_port.py [ADDRESS]     # prints a port free on ADDRESS (all addresses when empty)
"""

import random
import socket
import sys

LOWEST = 10000


def ephemeral_low():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        return int(ranges.read().split()[0])


def bindable(address, port):
    """The port bound on `address` as a server binds it (SO_REUSEADDR), or 0 if taken."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return 0
        return probe.getsockname()[1]


def free_port(address="", below=None):
    """A port free on `address` a moment ago, below the ephemeral range (starting at `below`,
    read from the kernel when None); the kernel's pick where that range starts too low to leave
    room, or nothing below it could be bound."""
    below = ephemeral_low() if below is None else below
    if below - LOWEST >= 1000:
        for _ in range(100):
            port = bindable(address, random.randrange(LOWEST, below))
            if port:
                return port
    return bindable(address, 0)


if __name__ == "__main__":
    print(free_port(sys.argv[1] if len(sys.argv) > 1 else ""))
