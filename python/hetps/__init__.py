"""hetps: the worker client of the hetps parameter server, for Python.

    import hetps
    client = hetps.Client(hetps.ClientOptions.from_env())   # or ClientOptions(servers=[...], ...)
    w = client.declare("w", initial_values=numpy.zeros(1000, numpy.float32), optimizer="adam",
                       params={"lr": 1e-3})
    client.push_pull(w, gradient, weights, step).wait()

Arrays are torch CPU tensors or numpy arrays (contiguous; float32, bfloat16 or float16), used in
place. Failures raise hetps.Error, whose `code` names the status (e.g. "UNAVAILABLE").
hetps.torch wraps a PyTorch training loop (ServerOptimizer, DistributedOptimizer); hetps.run
starts a local cluster and the workers of a job (python -m hetps.run --help).
"""

import atexit as _atexit
import os as _os

from hetps._hetps import (  # noqa: F401 (re-exported)
    Client,
    ClientOptions,
    Error,
    Initializer,
    Operation,
    ShardStats,
    TensorPartition,
    available_transports,
)
from hetps._hetps import _stop_callbacks

__all__ = [
    "Client",
    "ClientOptions",
    "Error",
    "Initializer",
    "Operation",
    "ShardStats",
    "TensorPartition",
    "available_transports",
    "options_from_env",
    "wait_all",
]

# Operations' callbacks run on a thread of the module's; it must end before the interpreter.
_atexit.register(_stop_callbacks)


def _env_int(names, default):
    for name in names:
        value = _os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"${name} must be an integer, not {value!r}") from None
    return default


def options_from_env(**overrides):
    """ClientOptions from the environment hetps.run (or a scheduler) sets.

    HETPS_SERVERS    shard addresses in index order, comma-separated (required)
    HETPS_RANK       this worker's rank (else torchrun's RANK, else 0)
    HETPS_WORLD_SIZE workers in the job (else torchrun's WORLD_SIZE, else 1)
    HETPS_TRANSPORT  "grpc" or "ucx" (default: grpc)
    HETPS_JOB_ID     the shards' --job_id (default: hetps)
    HETPS_AUTH_TOKEN the job's token (read by the client itself)
    HETPS_TLS_CA_FILE, HETPS_CALL_TIMEOUT_S: TLS, and the seconds a message may take
    HETPS_METRICS_PORT the port of the worker's /metrics page (0: any free one)
    Keyword arguments override any field.
    """
    servers = _os.environ.get("HETPS_SERVERS", "")
    options = ClientOptions()
    options.servers = [s for s in servers.split(",") if s]
    options.rank = _env_int(["HETPS_RANK", "RANK"], 0)
    options.world_size = _env_int(["HETPS_WORLD_SIZE", "WORLD_SIZE"], 1)
    options.transport = _os.environ.get("HETPS_TRANSPORT", options.transport)
    options.job_id = _os.environ.get("HETPS_JOB_ID", options.job_id)
    options.tls_ca_file = _os.environ.get("HETPS_TLS_CA_FILE", "")
    if _os.environ.get("HETPS_CALL_TIMEOUT_S"):
        options.call_timeout = float(_os.environ["HETPS_CALL_TIMEOUT_S"])
    if _os.environ.get("HETPS_METRICS_PORT"):
        options.metrics_port = int(_os.environ["HETPS_METRICS_PORT"])
    for name, value in overrides.items():
        if not hasattr(options, name) or name.startswith("_"):
            raise TypeError(f"ClientOptions has no field {name!r}")
        setattr(options, name, value)
    if not options.servers:
        raise ValueError(
            "no shards: set HETPS_SERVERS (host:port,... in shard order) or pass servers=")
    return options


ClientOptions.from_env = staticmethod(options_from_env)


def wait_all(operations):
    """Waits for every operation; raises the first failure after all have ended."""
    first = None
    for operation in operations:
        try:
            operation.wait()
        except Error as error:
            if first is None:
                first = error
    if first is not None:
        raise first
