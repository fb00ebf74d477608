"""What the Python module adds to one operation: a tensor's push_pull(...).wait() after another,
from Python and from ps-bench (the C++ client, the floor), each against a fresh local shard of
its own, rounds interleaved. Prints per size the medians over the rounds of both p50s and the
Python layer's ratio to ps-bench.

    /usr/bin/python3 bench/python_ops.py --build build --sizes 4K,64K,1M --rounds 5

Small tensors show the module's own cost per call (argument checks, the handle, the GIL given
up and taken back); from about a MiB up both ways are the transfer.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20}
    scale = units.get(text[-1:].upper(), 1)
    number = text[:-1] if scale > 1 else text
    if not number.isdigit() or int(number) * scale < 4 or int(number) * scale % 4:
        raise SystemExit(f"--sizes takes byte counts that are multiples of 4, e.g. 4K,1M, not {text}")
    return int(number) * scale


def cluster(args):
    from hetps.cluster import LocalCluster
    return LocalCluster(shards=1, workers=1, transport=args.transport,
                        ps_server=os.path.join(args.build, "server", "ps-server"))


def python_p50_us(args, size):
    import torch
    import hetps
    with cluster(args) as shards:
        options = hetps.ClientOptions(servers=shards.servers, transport=args.transport,
                                      call_timeout=60.0)
        with hetps.Client(options) as client:
            elements = size // 4
            tensor = client.declare("t", elements, optimizer="sum")
            gradient, weights = torch.ones(elements), torch.empty(elements)
            times = []
            for step in range(args.warmup + args.operations):
                start = time.perf_counter_ns()
                client.push_pull(tensor, gradient, weights, step).wait()
                if step >= args.warmup:
                    times.append(time.perf_counter_ns() - start)
            return statistics.median(times) / 1e3


def ps_bench_p50_us(args, size):
    with cluster(args) as shards, tempfile.TemporaryDirectory(prefix="python-ops-") as out_dir:
        subprocess.run(
            [os.path.join(args.build, "bench", "ps-bench"), f"--servers={shards.servers[0]}",
             f"--transport={args.transport}", "--op=pushpull", "--optimizer=sum",
             f"-b={size}", "-f=1", f"--iterations={args.operations}",
             f"--warmup={args.warmup}", "--timeout_s=60", f"--json={out_dir}/run.json"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        with open(f"{out_dir}/run.json") as f:
            return json.load(f)["results"][0]["p50_us"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--sizes", default="4K,64K,1M", help="tensor sizes in bytes (K, M)")
    parser.add_argument("--transport", default="ucx", help="grpc or ucx (client and shard)")
    parser.add_argument("--operations", type=int, default=5000, help="measured per size")
    parser.add_argument("--warmup", type=int, default=500,
                        help="unmeasured operations first (a connection's first hundreds are "
                             "slow: memory touched for the first time)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    os.environ.setdefault("HETPS_LOG_LEVEL", "warning")
    sizes = [parse_size(text) for text in args.sizes.split(",")]
    figures = {(size, way): [] for size in sizes for way in ("python", "c++")}
    for round_index in range(args.rounds):
        for size in sizes:
            figures[(size, "python")].append(python_p50_us(args, size))
            figures[(size, "c++")].append(ps_bench_p50_us(args, size))
            print(f"round {round_index + 1}: {size} bytes python "
                  f"{figures[(size, 'python')][-1]:.1f} us, ps-bench "
                  f"{figures[(size, 'c++')][-1]:.1f} us", flush=True)
    print(f"push_pull(...).wait() over {args.transport}, one shard, p50 medians of "
          f"{args.rounds} rounds of {args.operations}")
    print(f"{'bytes':>9} {'python (us)':>12} {'ps-bench (us)':>14} {'x ps-bench':>11}")
    for size in sizes:
        python = statistics.median(figures[(size, "python")])
        floor = statistics.median(figures[(size, "c++")])
        print(f"{size:>9} {python:>12.1f} {floor:>14.1f} {python / floor:>11.2f}")


if __name__ == "__main__":
    main()
