"""Shards on this machine: ps-server processes on 127.0.0.1 (or another host address).

    with hetps.cluster.LocalCluster(shards=2, workers=2) as cluster:
        options = hetps.ClientOptions(servers=cluster.servers, rank=0, world_size=2)

Each shard picks a free port and reports it through --port_file. Used by hetps.run and the
tests; a real cluster runs ps-server under systemd, Kubernetes or Slurm instead.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["LocalCluster", "find_ps_server"]

_PR_SET_PDEATHSIG = 1


def _end_with_parent():
    """In the child before exec: SIGTERM when the process that started it dies, so that no
    shard outlives a launcher that was killed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def find_ps_server():
    """The ps-server program: $HETPS_PS_SERVER, else the build tree this package was built in
    (build/python/hetps -> build/server/ps-server), else ps-server on the PATH."""
    explicit = os.environ.get("HETPS_PS_SERVER")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "server", "ps-server")
    if os.access(built, os.X_OK):
        return os.path.normpath(built)
    found = shutil.which("ps-server")
    if found:
        return found
    raise FileNotFoundError(
        "ps-server not found: set HETPS_PS_SERVER, or put ps-server on the PATH")


class LocalCluster:
    """`shards` ps-server processes for a job of `workers` workers.

    extra_flags go to every shard (e.g. ["--auth_token_file=job.token"]). Every shard runs with
    --lifetime_s so that it ends by itself even if this process dies without stopping it.
    """

    def __init__(self, shards=1, workers=1, transport=None, host="127.0.0.1", job_id=None,
                 extra_flags=(), ps_server=None, lifetime_s=3600, log_dir=None):
        if shards < 1 or workers < 1:
            raise ValueError("shards and workers must be at least 1")
        self.num_shards = shards
        self.num_workers = workers
        self._transport = transport
        self._host = host
        self._job_id = job_id
        self._extra_flags = list(extra_flags)
        self._ps_server = ps_server or find_ps_server()
        self._lifetime_s = lifetime_s
        self._own_dir = log_dir is None
        self.dir = log_dir or tempfile.mkdtemp(prefix="hetps-cluster-")
        self._processes = []
        self.servers = []

    def log_path(self, shard):
        return os.path.join(self.dir, f"shard{shard}.log")

    def start(self, timeout=30.0):
        """Starts the shards and waits (up to `timeout` seconds) until every one listens."""
        for shard in range(self.num_shards):
            port_file = os.path.join(self.dir, f"port{shard}")
            if os.path.exists(port_file):
                os.unlink(port_file)
            argv = [self._ps_server, f"--host={self._host}", "--port=0",
                    f"--port_file={port_file}", f"--shard_index={shard}",
                    f"--num_shards={self.num_shards}", f"--num_workers={self.num_workers}",
                    f"--lifetime_s={self._lifetime_s}"]
            if self._transport:
                argv.append(f"--transport={self._transport}")
            if self._job_id:
                argv.append(f"--job_id={self._job_id}")
            argv += self._extra_flags
            with open(self.log_path(shard), "wb") as log:
                self._processes.append(subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=_end_with_parent))
        deadline = time.monotonic() + timeout
        for shard, process in enumerate(self._processes):
            port = self._await_port(shard, process, deadline)
            self.servers.append(f"{self._host}:{port}")
        return self.servers

    def _await_port(self, shard, process, deadline):
        port_file = os.path.join(self.dir, f"port{shard}")
        delay = 0.005
        while True:
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    return int(text)
            except FileNotFoundError:
                pass
            if process.poll() is not None:
                self.stop()
                raise RuntimeError(f"shard {shard} exited with status {process.returncode}: "
                                   f"{self._tail(shard)}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"shard {shard} did not start listening: {self._tail(shard)}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _tail(self, shard):
        try:
            with open(self.log_path(shard), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def stop(self, timeout=10.0):
        """Stops every shard (SIGTERM, then SIGKILL after `timeout` seconds)."""
        for process in self._processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self._processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes = []

    def exited(self):
        """(index, status) of the first shard that has exited, or None."""
        for index, process in enumerate(self._processes):
            if process.poll() is not None:
                return index, process.returncode
        return None

    def close(self):
        self.stop()
        if self._own_dir and not os.environ.get("HETPS_KEEP_TEST_FILES"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        if not self.servers:
            self.start()
        return self

    def __exit__(self, *exc):
        self.close()
