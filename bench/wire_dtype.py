#!/usr/bin/python3
"""A push+pull of float32 arrays through the Python module with the tensor on the wire in
float32 and in a 16-bit format (the client converting both ways), from a Python process (its
allocator is glibc's, as a training job's is), against one local ps-server shard.

  /usr/bin/python3 bench/wire_dtype.py [--build build] [--elements 16777216] [--rounds 3]

Prints, per round and as medians over the rounds, each format's push+pull p50 and its ratio to
float32's (bench/PERFORMANCE.md, 16-bit wire types).
"""

import argparse
import os
import statistics
import sys
import time


def p50_ms(client, name, elements, dtype, steps, warmup):
    import numpy as np
    tensor = client.declare(name, elements, optimizer="sum", push_dtype=dtype, pull_dtype=dtype)
    gradient = np.full(elements, 0.001, dtype=np.float32)
    weights = np.zeros(elements, dtype=np.float32)
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        client.push_pull(tensor, gradient, weights, step).wait()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    # The sum rule answers with the step's sum of the workers' gradients (one worker here; in
    # 16 bits within their rounding).
    expected = 0.001
    if not np.allclose(weights, expected, rtol=1e-2):
        raise SystemExit(f"{name}: wrong weights {weights[:4]}, expected {expected}")
    client.drop([name])
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--elements", type=int, default=16 << 20)
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--transport", default="ucx")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import hetps
    from hetps.cluster import LocalCluster

    dtypes = ["fp32"] + [d for d in args.dtypes.split(",") if d]
    results = {d: [] for d in dtypes}
    with LocalCluster(shards=1, workers=1, transport=args.transport) as cluster:
        client = hetps.Client(hetps.ClientOptions(servers=cluster.servers,
                                                  transport=args.transport))
        for r in range(args.rounds):
            for d in dtypes:
                ms = p50_ms(client, f"wire_dtype/{r}/{d}", args.elements, d, args.steps,
                            args.warmup)
                results[d].append(ms)
                print(f"round {r} {d:5} p50 {ms:9.2f} ms", flush=True)
        client.shutdown()
    base = statistics.median(results["fp32"])
    print(f"{'dtype':5} {'p50 ms':>9} {'x fp32':>7}   ({args.elements} float32 elements, "
          f"{args.transport}, medians of {args.rounds} rounds)")
    for d in dtypes:
        ms = statistics.median(results[d])
        print(f"{d:5} {ms:9.2f} {ms / base:7.2f}")


if __name__ == "__main__":
    main()
