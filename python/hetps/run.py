"""Starts a hetps job on this machine: local shards and the worker processes.

    python -m hetps.run --shards 2 --workers 2 -- python train.py --epochs 3
    python -m hetps.run --servers 10.0.0.1:7000,10.0.0.2:7000 --workers 4 -- python train.py

With --shards it starts that many ps-server processes on --host (each picks a free port; the
addresses are printed) and stops them at the end; with --servers it uses running shards. Every
worker gets HETPS_SERVERS, HETPS_RANK, HETPS_WORLD_SIZE (and torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE), HETPS_TRANSPORT, HETPS_JOB_ID and the job's token in
HETPS_AUTH_TOKEN (from --auth_token_file, else $HETPS_AUTH_TOKEN, else a random one for local
shards), which hetps.options_from_env() reads. SIGINT and SIGTERM are passed on to the workers.
When a worker fails, the others are stopped and the launcher exits with its status; when a
shard dies, everything stops with status 1.
"""

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time

from hetps.cluster import LocalCluster

GRACE_S = 10.0  # from SIGTERM to SIGKILL


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m hetps.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--shards", type=int, help="start this many local shards")
    where.add_argument("--servers", help="use these running shards (host:port,... in order)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (world size)")
    parser.add_argument("--transport", default=None,
                        help="grpc or ucx (default: the shards' default, UCX where built; "
                             "workers use grpc unless told)")
    parser.add_argument("--host", default="127.0.0.1", help="where local shards listen")
    parser.add_argument("--job_id", default="hetps")
    parser.add_argument("--auth_token_file", default="", help="the job's token")
    parser.add_argument("--shard_flag", action="append", default=[],
                        help="a flag for every local shard, e.g. --shard_flag=--threads=2")
    parser.add_argument("--ps_server", default=None, help="the ps-server program")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the worker's command line")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the worker's command after --")
    if args.workers < 1 or (args.shards is not None and args.shards < 1):
        parser.error("--workers and --shards must be at least 1")
    return args


def job_token(args):
    if args.auth_token_file:
        with open(args.auth_token_file) as f:
            token = f.read().strip()
        if not token:
            raise SystemExit(f"hetps.run: {args.auth_token_file} holds no token")
        return token
    if os.environ.get("HETPS_AUTH_TOKEN"):
        return os.environ["HETPS_AUTH_TOKEN"]
    return secrets.token_hex(32) if args.shards else ""


class Job:
    def __init__(self, args):
        self.args = args
        self.cluster = None
        self.workers = []
        self.token_dir = None
        self.stopping = False

    def start_shards(self, token):
        flags = list(self.args.shard_flag)
        if token:
            self.token_dir = tempfile.mkdtemp(prefix="hetps-run-")
            path = os.path.join(self.token_dir, "job.token")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(token + "\n")
            flags.append(f"--auth_token_file={path}")
        self.cluster = LocalCluster(
            shards=self.args.shards, workers=self.args.workers, transport=self.args.transport,
            host=self.args.host, job_id=self.args.job_id, extra_flags=flags,
            ps_server=self.args.ps_server, lifetime_s=0)
        servers = self.cluster.start()
        for index, address in enumerate(servers):
            print(f"hetps.run: shard {index} listens on {address} "
                  f"(log {self.cluster.log_path(index)})", flush=True)
        return servers

    def start_workers(self, servers, token):
        for rank in range(self.args.workers):
            env = dict(os.environ)
            env.update({
                "HETPS_SERVERS": ",".join(servers),
                "HETPS_RANK": str(rank), "HETPS_WORLD_SIZE": str(self.args.workers),
                "RANK": str(rank), "WORLD_SIZE": str(self.args.workers),
                "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(self.args.workers),
                "HETPS_JOB_ID": self.args.job_id,
            })
            if self.args.transport:
                env["HETPS_TRANSPORT"] = self.args.transport
            if token:
                env["HETPS_AUTH_TOKEN"] = token
            self.workers.append(subprocess.Popen(self.args.command, env=env))

    def forward(self, signum, frame):
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signum)

    def wait(self):
        """The job's exit status: 0, the first failed worker's, or 1 if a shard died."""
        while True:
            running = False
            for rank, worker in enumerate(self.workers):
                code = worker.poll()
                if code is None:
                    running = True
                elif code != 0:
                    print(f"hetps.run: worker {rank} exited with status {code}: stopping the "
                          "job", file=sys.stderr, flush=True)
                    return code if code > 0 else 128 - code
            if not running:
                return 0
            exited = self.cluster.exited() if self.cluster is not None else None
            if exited is not None:
                index, status = exited
                print(f"hetps.run: shard {index} exited with status {status} "
                      f"(log {self.cluster.log_path(index)}): stopping the job",
                      file=sys.stderr, flush=True)
                return 1
            time.sleep(0.05)

    def stop(self):
        for worker in self.workers:
            if worker.poll() is None:
                worker.terminate()
        deadline = time.monotonic() + GRACE_S
        for worker in self.workers:
            try:
                worker.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        if self.cluster is not None:
            self.cluster.close()
        if self.token_dir is not None:
            for name in os.listdir(self.token_dir):
                os.unlink(os.path.join(self.token_dir, name))
            os.rmdir(self.token_dir)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    token = job_token(args)
    job = Job(args)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, job.forward)
    try:
        servers = job.start_shards(token) if args.shards else args.servers.split(",")
        job.start_workers(servers, token)
        return job.wait()
    finally:
        job.stop()


if __name__ == "__main__":
    sys.exit(main())
