#!/usr/bin/env python3
"""Plain-TCP floors for bench/zone_cluster.sh: a one-byte round trip through the zone's links,
and (FLOOR=1) a step's: every worker exchanges its share of the model with every shard over one
TCP connection each, both directions at once, in rounds that all workers start at the same
moments; a round takes as long as its slowest worker, as a BSP step does.

    tcp_exchange.py serve HOST PORT BYTES         # in each shard's namespace: answers every
                                                  # connection's BYTES with BYTES, per round
    tcp_exchange.py exchange SERVERS BYTES ROUNDS START PERIOD OUT
                                                  # in each worker's namespace: round r starts at
                                                  # wall time START + r * PERIOD; one line per
                                                  # round ("r milliseconds") in OUT
    tcp_exchange.py slowest OUT...                # the median over rounds of the slowest worker
    tcp_exchange.py pingpong SERVER ROUNDS        # against `serve ... 1`: the median round trip
                                                  # of one byte, milliseconds

Each side gives up after 10 minutes (the exchange after its last round's period).
"""

import socket
import statistics
import sys
import threading
import time

CHUNK = 1 << 20


def receive(connection, size):
    buffer = bytearray(min(CHUNK, max(size, 1)))
    left = size
    while left:
        got = connection.recv_into(buffer, min(len(buffer), left))
        if not got:
            raise EOFError
        left -= got


def answer(connection, size):
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = bytes(size)
    try:
        while True:
            # A round begins with the worker's first byte; then both directions at once.
            if not connection.recv(1):
                return
            if size == 1:  # a ping-pong: answer at once, no thread
                connection.sendall(b"p")
                continue
            sender = threading.Thread(target=connection.sendall, args=(data,))
            sender.start()
            receive(connection, size - 1)
            sender.join()
    except (EOFError, OSError):
        pass


def serve(host, port, size):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, int(port)))
    listener.listen(64)
    listener.settimeout(600)
    while True:
        connection, _ = listener.accept()
        connection.settimeout(600)
        threading.Thread(target=answer, args=(connection, int(size)), daemon=True).start()


def connect(address, deadline):
    host, port = address.rsplit(":", 1)
    while True:
        try:
            connection = socket.create_connection((host, int(port)), timeout=600)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def exchange(servers, size, rounds, start, period, out):
    size, rounds, start, period = int(size), int(rounds), float(start), float(period)
    deadline = time.monotonic() + 30
    connections = [connect(address, deadline) for address in servers.split(",")]
    data = bytes(size)
    with open(out, "w") as results:
        for r in range(rounds):
            begin = start + r * period
            while time.time() < begin:
                time.sleep(min(0.0005, max(0.0, begin - time.time())))
            threads = []
            for connection in connections:
                threads.append(threading.Thread(target=connection.sendall, args=(data,)))
                threads.append(threading.Thread(target=receive, args=(connection, size)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            results.write(f"{r} {(time.time() - begin) * 1e3:.2f}\n")
            results.flush()


def pingpong(server, rounds):
    connection = connect(server, time.monotonic() + 30)
    times = []
    for _ in range(int(rounds)):
        begin = time.perf_counter()
        connection.sendall(b"p")
        receive(connection, 1)
        times.append((time.perf_counter() - begin) * 1e3)
    print(f"{statistics.median(times):.2f}")


def slowest(paths):
    rounds = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                r, ms = line.split()
                rounds[r] = max(rounds.get(r, 0.0), float(ms))
    print(f"{statistics.median(rounds.values()):.2f}")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"serve": serve, "exchange": exchange, "slowest": lambda *p: slowest(p),
     "pingpong": pingpong}[command](*args)
