"""One training step's communication for a PyTorch model of M bytes, four ways, in one run:

  allreduce   torch.distributed all-reduce (gloo) of every gradient, then the average: what
              DistributedDataParallel does, the alternative users pick
  hetps-sum   hetps.torch.DistributedOptimizer: the shards sum, the average goes into .grad
  hetps-adam  hetps.torch.ServerOptimizer("adam"): the shards sum and run Adam, the new weights
              come back into the parameters
  c++-sum, c++-adam
              ps-bench (the C++ client, no Python) pushing and pulling the same bytes with the
              same rule against the same kind of cluster: the floor of the Python layer

W worker processes on this machine and S local shards (fresh ones for every way). The model is
layers of 4 MiB (fp32); gradients are filled in, not computed, so each figure is communication
only (no overlap with backward). Prints the median step time over the measured steps (rank
0's), the bytes each worker sends per step, and the Python layer's ratio to ps-bench.

    /usr/bin/python3 bench/torch_step.py --build build --workers 2 --shards 2 --model_mb 100
    /usr/bin/python3 bench/torch_step.py --build build --model_mb 4,16,64,256 --plot step.svg

With several model sizes, each is measured in turn (a table each); --plot draws the step times
and their ratio to the first way against the model's size (ps-plot).

--device cuda keeps the parameters and gradients in GPU memory (all workers on GPU 0): hetps
moves them through its device client, gloo's all-reduce through host memory of its own; a
step ends when the GPU has the result (torch.cuda.synchronize). ps-bench stays on the host.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WAYS = ["allreduce", "hetps-sum", "hetps-adam", "c++-sum", "c++-adam"]
LAYER_ELEMENTS = 1 << 20  # 4 MiB of fp32 per layer


def worker(args):
    import torch
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    layers = max(1, args.model_mb * (1 << 20) // (4 * LAYER_ELEMENTS))
    params = [torch.nn.Parameter(torch.full((LAYER_ELEMENTS,), 0.01 * (i + 1),
                                            device=args.device))
              for i in range(layers)]
    for p in params:
        p.grad = torch.full_like(p, 0.001 * (rank + 1))
    if args.mode == "allreduce":
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world_size)

        def step():
            handles = [dist.all_reduce(p.grad, async_op=True) for p in params]
            for handle in handles:
                handle.wait()
            for p in params:
                p.grad.div_(world_size)
    else:
        import hetps
        import hetps.torch
        client = hetps.Client(hetps.options_from_env())
        named = [(f"layer{i}", p) for i, p in enumerate(params)]
        if args.mode == "hetps-sum":
            # The sum, as ps-bench's: averaging is one more pass over the gradients.
            optimizer = hetps.torch.DistributedOptimizer(
                torch.optim.SGD([p for _, p in named], lr=0.0), named, client=client,
                average=False)
            exchange = optimizer._exchange

            def step():
                exchange.finish()  # the sum into .grad; the local optimizer's step is not timed
        else:
            optimizer = hetps.torch.ServerOptimizer(named, "adam", lr=1e-3, client=client)

            def step():
                optimizer.step()
    on_gpu = args.device != "cpu"
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        step()
        if on_gpu:
            torch.cuda.synchronize()  # the step's results are in GPU memory
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    if args.mode != "allreduce":
        client.barrier()
        client.shutdown()
    else:
        # Ended here, not at the interpreter's exit, where gloo's threads may still run and
        # abort the process ("terminate called without an active exception": seen once in a
        # suite run).
        dist.barrier()
        dist.destroy_process_group()
    print(json.dumps({"rank": rank, "times": times, "layers": layers}), flush=True)


def run_workers(args, mode, env_extra):
    procs = []
    for rank in range(args.workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.workers),
                   HETPS_RANK=str(rank), HETPS_WORLD_SIZE=str(args.workers), **env_extra)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--role", "worker", "--mode", mode,
             "--model_mb", str(args.model_mb), "--steps", str(args.steps),
             "--warmup", str(args.warmup), "--device", args.device],
            env=env, stdout=subprocess.PIPE, text=True))
    outputs = finish_all(procs, f"{mode}: a worker", args.way_timeout_s)
    return json.loads(outputs[0].strip().splitlines()[-1])


def finish_all(procs, what, timeout_s):
    """Each process's output, once all have exited 0; ends the run, naming `what`, if one fails
    or they are not all done within `timeout_s` (then all of them are killed)."""
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise SystemExit(f"{what} did not finish within {timeout_s} s")
        if proc.returncode != 0:
            raise SystemExit(f"{what} exited with status {proc.returncode}")
        outputs.append(out)
    return outputs


def with_cluster(args, body):
    sys.path.insert(0, os.path.join(args.build, "python"))
    from hetps.cluster import LocalCluster
    with LocalCluster(shards=args.shards, workers=args.workers, transport=args.shard_transport,
                      ps_server=os.path.join(args.build, "server", "ps-server")) as cluster:
        return body(cluster)


def run_hetps(args, mode):
    def body(cluster):
        env = {"HETPS_SERVERS": ",".join(cluster.servers), "HETPS_TRANSPORT": args.transport,
               "HETPS_CALL_TIMEOUT_S": "300", "HETPS_LOG_LEVEL": "warning",
               "PYTHONPATH": os.path.join(args.build, "python")}
        return run_workers(args, mode, env)["times"]
    return with_cluster(args, body)


def run_ps_bench(args, rule):
    model_bytes = max(1, args.model_mb * (1 << 20) // (4 * LAYER_ELEMENTS)) * 4 * LAYER_ELEMENTS

    def body(cluster):
        with tempfile.TemporaryDirectory(prefix="torch-step-") as out_dir:
            return run_ps_bench_workers(args, rule, model_bytes, cluster, out_dir)
    return with_cluster(args, body)


def run_ps_bench_workers(args, rule, model_bytes, cluster, out_dir):
    procs = []
    for rank in range(args.workers):
        procs.append(subprocess.Popen(
            [os.path.join(args.build, "bench", "ps-bench"),
             f"--servers={','.join(cluster.servers)}", f"--rank={rank}",
             f"--world_size={args.workers}", f"--transport={args.transport}",
             "--op=pushpull", f"-b={model_bytes}", f"-e={model_bytes}",
             f"--optimizer={rule}", f"--iterations={args.steps}",
             f"--warmup={args.warmup}", "--timeout_s=300",
             f"--json={out_dir}/rank{rank}.json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    finish_all(procs, f"ps-bench ({rule})", args.way_timeout_s)
    with open(f"{out_dir}/rank0.json") as f:
        return json.load(f)["results"][0]["p50_us"] / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", default="driver", choices=["driver", "worker"])
    parser.add_argument("--mode", default="")
    parser.add_argument("--build", default="build")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--model_mb", default="100",
                        help="the model's size in MiB, or a list of sizes measured in turn")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default=",".join(WAYS), help="which ways to measure")
    parser.add_argument("--transport", default="grpc", help="the workers' transport")
    parser.add_argument("--shard_transport", default=None,
                        help="the shards' --transport (default: theirs, UCX where built)")
    parser.add_argument("--plot", default="", help="an SVG of step times against model size")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the parameters and gradients live")
    parser.add_argument("--way_timeout_s", type=float, default=900,
                        help="how long one way's workers may take (a hang fails, naming it)")
    args = parser.parse_args()
    if args.role == "worker":
        args.model_mb = int(args.model_mb)
        return worker(args)

    try:
        sizes = [int(mb) for mb in args.model_mb.split(",")]
    except ValueError:
        raise SystemExit(f"--model_mb takes sizes in MiB, e.g. 100 or 4,16,64, not {args.model_mb}")
    ways = args.ways.split(",")
    unknown = set(ways) - set(WAYS)
    if unknown:
        raise SystemExit(f"--ways takes {','.join(WAYS)}, not {','.join(sorted(unknown))}")
    points = []  # (model bytes, way, seconds)
    for index, size in enumerate(sizes):
        args.model_mb = size
        # A port per size and round: gloo's listener of the last one may still linger.
        model, found = measure_size(args, ways, 29500 + (os.getpid() + index * args.rounds) % 1000)
        points.extend((model, name, seconds) for name, seconds in found.items())
    if args.plot:
        draw(args, ways, points)


def measure_size(args, ways, port):
    """Rounds of every way for one model size: prints its table, returns (bytes, {way: s})."""
    layers = max(1, args.model_mb * (1 << 20) // (4 * LAYER_ELEMENTS))
    model = layers * 4 * LAYER_ELEMENTS
    w = args.workers
    print(f"model: {layers} layers of 4 MiB = {model / 2**20:.0f} MiB in {args.device} memory; "
          f"{w} workers, {args.shards} shards, hetps over {args.transport}; {args.steps} steps after "
          f"{args.warmup} warm-up, {args.rounds} rounds", flush=True)
    # Rounds interleave the ways, so that a noisy moment does not fall on one of them only;
    # each figure is the median over the rounds of rank 0's median step.
    figures = {name: [] for name in ways}
    for round_index in range(args.rounds):
        for name in ways:
            if name == "allreduce":
                times = run_workers(args, "allreduce",
                                    {"MASTER_ADDR": "127.0.0.1",
                                     "MASTER_PORT": str(port + round_index)})["times"]
                figures[name].append(statistics.median(times))
            elif name.startswith("hetps-"):
                figures[name].append(statistics.median(run_hetps(args, name)))
            else:
                figures[name].append(run_ps_bench(args, name[len("c++-"):]))
            print(f"round {round_index + 1}: {name} {figures[name][-1] * 1e3:.1f} ms", flush=True)
    moved = {"allreduce": 2 * (w - 1) / w * model}
    rows = [(name, statistics.median(figures[name]), moved.get(name, 2 * model))
            for name in ways]
    found = dict((name, seconds) for name, seconds, _ in rows)
    print(f"{'way':<11} {'step (ms)':>10} {'sent+received/worker (MiB)':>28} "
          f"{'x ' + ways[0]:>14}")
    base = rows[0][1]
    for name, seconds, bytes_moved in rows:
        print(f"{name:<11} {seconds * 1e3:>10.1f} {bytes_moved / 2**20:>28.0f} "
              f"{seconds / base:>14.2f}")
    for rule in ("sum", "adam"):
        if f"hetps-{rule}" in found and f"c++-{rule}" in found:
            print(f"python layer over ps-bench, {rule}: "
                  f"{found[f'hetps-{rule}'] / found[f'c++-{rule}']:.2f}x")
    return model, found


def draw(args, ways, points):
    """Step time and its ratio to the first way against model size, through ps-plot."""
    times = f"step's communication (ms), {args.workers} workers x {args.shards} shards"
    ratio = f"step time / {ways[0]}'s"
    x_label = "model size (bytes)"
    lines = [f"panel\t{times}\tlog\t{x_label}", f"panel\t{ratio}\tlinear\t{x_label}"]
    first = {model: seconds for model, name, seconds in points if name == ways[0]}
    for model, name, seconds in points:
        style = "dotted" if name.startswith("c++-") else "solid"
        lines.append(f"{times}\t{name}\t{model}\t{seconds * 1e3:.3f}\t{style}")
        lines.append(f"{ratio}\t{name}\t{model}\t{seconds / first[model]:.4f}\t{style}")
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as table:
        table.write("\n".join(lines) + "\n")
    try:
        subprocess.run([os.path.join(args.build, "bench", "ps-plot"), "--in", table.name,
                        "--out", args.plot], check=True)
    finally:
        os.unlink(table.name)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
