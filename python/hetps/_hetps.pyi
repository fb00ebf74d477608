# Type stubs of the extension (python/src/); docstrings are in the extension itself.
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

Array = Any  # a torch CPU tensor or a numpy array: contiguous float32, bfloat16 or float16;
# or GPU memory (a torch CUDA tensor, __cuda_array_interface__): contiguous float32
TensorId = int

class Error(RuntimeError):
    code: str  # the status code's name, e.g. "UNAVAILABLE"
    message: str

class ClientOptions:
    servers: List[str]
    rank: int
    world_size: int
    job_id: str
    admin: bool
    auth_token_file: str
    tls_ca_file: str
    tls_cert_file: str
    tls_key_file: str
    transport: str
    ucx_net_devices: str
    ucx_busy_poll: bool
    call_timeout: float
    connect_timeout: float
    partition_bytes: int
    max_message_bytes: int
    metrics_port: int
    metrics_host: str
    def __init__(self, **fields: Any) -> None: ...
    @staticmethod
    def from_env(**overrides: Any) -> "ClientOptions": ...

class Initializer:
    @staticmethod
    def zeros() -> "Initializer": ...
    @staticmethod
    def constant(value: float) -> "Initializer": ...
    @staticmethod
    def uniform(low: float, high: float, seed: int = 0) -> "Initializer": ...
    @staticmethod
    def normal(mean: float, stddev: float, seed: int = 0) -> "Initializer": ...

class DropResult:
    tensors: int
    released_bytes: int

class ShardStats:
    shard_index: int
    num_tensors: int
    num_partitions: int
    parameter_bytes: int
    optimizer_state_bytes: int
    data_requests: int
    push_items: int
    pull_items: int
    payload_bytes_received: int
    payload_bytes_sent: int
    failed_requests: int
    pushes_refused: int
    tensors_dropped: int
    requests_waiting: int
    checkpoints_waiting: int
    last_checkpoint: int
    backup_partitions: int
    replication_resends: int
    min_version: int
    max_version: int

class TensorPartition:
    begin: int
    size: int
    shard: int

class Operation:
    def wait(self) -> None: ...
    def done(self) -> bool: ...
    def add_done_callback(self, callback: Callable[["Operation"], Any]) -> None: ...
    def exception(self) -> Optional[Error]: ...
    @property
    def _waiters(self) -> int: ...

Tensors = Union[TensorId, Sequence[TensorId]]
Arrays = Union[Array, Sequence[Array]]
Callback = Optional[Callable[[Operation], Any]]

class Client:
    def __init__(self, options: ClientOptions) -> None: ...
    @property
    def options(self) -> ClientOptions: ...
    @property
    def metrics_address(self) -> str: ...
    @property
    def resume_step(self) -> int: ...
    def declare(self, name: str, num_elements: Optional[int] = None, *,
                initial_values: Optional[Array] = None, optimizer: str = "sgd",
                params: Dict[str, float] = ..., sync: str = "bsp",
                init: Optional[Initializer] = None, push_dtype: str = "fp32",
                pull_dtype: str = "fp32") -> TensorId: ...
    def partitions(self, tensor: TensorId) -> List[TensorPartition]: ...
    def push(self, tensors: Tensors, gradients: Arrays, step: int,
             callback: Callback = None) -> Operation: ...
    def pull(self, tensors: Tensors, out: Arrays, min_version: int = 0,
             callback: Callback = None) -> Operation: ...
    def push_pull(self, tensors: Tensors, gradients: Arrays, out: Arrays, step: int,
                  callback: Callback = None) -> Operation: ...
    def set_hyperparameters(self, tensor: TensorId, from_step: int,
                            changes: Dict[str, float]) -> None: ...
    def read_state(self, tensor: TensorId) -> Tuple[int, Any, List[Any]]: ...
    def write_state(self, tensor: TensorId, version: int, weights: Array,
                    slots: Sequence[Array]) -> None: ...
    def checkpoint(self, step: int) -> None: ...
    def barrier(self) -> None: ...
    def drop(self, names: List[str]) -> DropResult: ...
    def drop_all(self) -> DropResult: ...
    def stop_shard(self, shard: int) -> None: ...
    def stats(self) -> List[ShardStats]: ...
    def shutdown(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *args: Any) -> None: ...

def available_transports() -> str: ...
def _stop_callbacks() -> None: ...
def _callbacks_posted() -> int: ...
