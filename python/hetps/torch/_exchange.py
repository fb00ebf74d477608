"""The gradient exchange behind ServerOptimizer and DistributedOptimizer.

Parameters are grouped into buckets: a parameter of at least `bucket_bytes` is a bucket of its
own and travels from its .grad and into its .data without a copy; smaller ones are packed into
flat buffers of about `bucket_bytes`, so a model of hundreds of small tensors sends a few
messages. Each bucket is one hetps tensor. A hook on every parameter's gradient accumulator
(torch 1.13 has no post-accumulate-grad hook; Horovod hooks the accumulator the same way) counts
the parameters whose gradient is final; when a bucket's last one is, the bucket's push-pull
starts, while backward goes on with the layers below. finish() starts what has not started
(a parameter that got no gradient pushes zeros: in BSP every worker pushes every tensor each
step), waits for everything, and writes the results back.

CUDA parameters (float32) travel through the client's device path: each push-pull is ordered
on the stream current when it starts (backward's, for the hooks), and the results are written
back on the current stream after it.
"""

import threading
import time

import torch

import hetps

_TORCH_TO_WIRE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


class Bucket:
    """One hetps tensor: one large parameter (direct) or several small ones (packed)."""

    def __init__(self, name, group, params):
        self.name = name
        self.group = group  # index into param_groups
        self.params = params
        self.numel = sum(p.numel() for p in params)
        self.direct = len(params) == 1
        self.dtype = params[0].dtype
        self.tensor_id = None
        self.gradient = None  # packed: the flat gradient
        self.out = None  # what the pull writes: packed flat weights, or a staging buffer
        self.ready = set()  # ids of the parameters whose gradient is final this step
        self.operation = None


class Exchange:
    """mode "server": the shards run `rules[group]` and send back the new weights.
    mode "sum": the shards sum the gradients (BSP) and send the sum back into .grad (divided
    by the world size when `average`)."""

    def __init__(self, client, groups, mode, rules, bucket_bytes, prefix, average=False):
        self.client = client
        self.mode = mode
        self.average = average
        self.world_size = client.options.world_size
        self.step = 0
        self._lock = threading.Lock()
        self._step_started = False
        self._rules = rules
        self._sent_params = {}  # group -> the hyperparameters the shards have
        self.buckets = []
        self._bucket_of = {}
        self._accumulators = []
        self.push_log = []  # (time.perf_counter(), bucket name) of this step's pushes
        for group_index, named in enumerate(groups):
            self._make_buckets(group_index, named, bucket_bytes, prefix)
        devices = {str(p.device) for b in self.buckets for p in b.params}
        if len(devices) > 1:
            raise ValueError(f"parameters on {sorted(devices)}: hetps.torch moves the parameters "
                             "of one device per optimizer (one worker per GPU)")

    # --- setup ---

    def _make_buckets(self, group, named, bucket_bytes, prefix):
        # Backward meets the last layers first: bucket from the end so that the first buckets
        # to fill are the first to go.
        pending, pending_bytes = [], 0

        def close():
            nonlocal pending, pending_bytes
            if pending:
                names = [name for name, _ in pending]
                bucket = Bucket(f"{prefix}g{group}/{names[0]}..{names[-1]}({len(names)})", group,
                                [p for _, p in pending])
                self.buckets.append(bucket)
                pending, pending_bytes = [], 0

        for name, p in reversed(named):
            check_parameter(name, p)
            size = p.numel() * p.element_size()
            if size >= bucket_bytes:
                self.buckets.append(Bucket(f"{prefix}{name}", group, [p]))
                continue
            if pending and (pending_bytes + size > bucket_bytes or p.dtype != pending[0][1].dtype):
                close()
            pending.append((name, p))
            pending_bytes += size
        close()
        for bucket in self.buckets:
            for p in bucket.params:
                self._bucket_of[id(p)] = bucket

    def declare(self, rank):
        """Declares every bucket; rank 0's parameter values are the initial ones, and every
        worker starts from them (rank 0 declares first, the others after a barrier)."""
        if rank == 0:
            self._declare_all()
        self.client.barrier()
        if rank != 0:
            self._declare_all()
        self._allocate()
        operations = [self.client.pull(b.tensor_id, self._pull_target(b, initial=True))
                      for b in self.buckets]
        hetps.wait_all(operations)
        for bucket in self.buckets:
            self._unpack_weights(bucket, initial=True)

    def _declare_all(self):
        for bucket in self.buckets:
            values = torch.cat([p.detach().reshape(-1).float() for p in bucket.params]).cpu()
            wire = _TORCH_TO_WIRE[bucket.dtype]
            rule, params = self._rules(bucket.group)
            bucket.tensor_id = self.client.declare(
                bucket.name, bucket.numel, initial_values=values, optimizer=rule,
                params=params, push_dtype=wire, pull_dtype=wire)
            self._sent_params[bucket.group] = params

    def _allocate(self):
        for bucket in self.buckets:
            if not bucket.direct:
                device = bucket.params[0].device
                bucket.gradient = torch.zeros(bucket.numel, dtype=bucket.dtype, device=device)
                bucket.out = torch.zeros(bucket.numel, dtype=bucket.dtype, device=device)

    def group_of(self, p):
        return self._bucket_of[id(p)].group

    def read_states(self):
        """The shards' state of every parameter: [(param, version, [slot tensors shaped like the
        parameter])], read between steps."""
        states = []
        for bucket in self.buckets:
            version, _, slots = self.client.read_state(bucket.tensor_id)
            offset = 0
            for p in bucket.params:
                n = p.numel()
                states.append((p, version, [torch.from_numpy(slot[offset:offset + n].copy())
                                            .to(p.device).view_as(p) for slot in slots]))
                offset += n
        return states

    def write_states(self, version, slots_of):
        """Writes every bucket's weights (the parameters' current values) and optimizer state
        (`slots_of(param)`: its slot tensors) at `version` to the shards."""
        for bucket in self.buckets:
            weights = torch.cat([p.detach().reshape(-1).float() for p in bucket.params])
            per_param = [slots_of(p) for p in bucket.params]
            slots = [torch.cat([slots[k].detach().reshape(-1).float() for slots in per_param])
                     for k in range(len(per_param[0]))]
            self.client.write_state(bucket.tensor_id, version, weights.cpu().numpy(),
                                    [slot.cpu().numpy() for slot in slots])

    def restart_at(self, step):
        """Goes on from the shards' version `step`: pulls its weights into the parameters."""
        self.step = step
        operations = [self.client.pull(b.tensor_id, self._pull_target(b, initial=True),
                                       min_version=step) for b in self.buckets]
        hetps.wait_all(operations)
        for bucket in self.buckets:
            self._unpack_weights(bucket, initial=True)

    def install_hooks(self):
        for bucket in self.buckets:
            for p in bucket.params:
                # The accumulator is reached through a view of the parameter; keep it alive, or
                # its hook goes with it.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._hook_for(p))
                self._accumulators.append(accumulator)

    def _hook_for(self, p):
        def hook(*unused):
            self._gradient_ready(p)
        return hook

    # --- one step ---

    def _gradient_ready(self, p):
        bucket = self._bucket_of[id(p)]
        with self._lock:
            if bucket.operation is not None or id(p) in bucket.ready:
                return  # a second backward before step(): the first one's gradient went
            bucket.ready.add(id(p))
            if len(bucket.ready) < len(bucket.params):
                return
            self._launch(bucket)

    def _launch(self, *buckets):
        """Starts one push-pull for `buckets` (several: one call, so that the client packs
        them as it packs one tensor's partitions). REQUIRES: self._lock is held."""
        if not self._step_started:
            self._step_started = True
            self.push_log = []
            self._sync_hyperparameters()
        gradients = [self._gradient(bucket) for bucket in buckets]
        now = time.perf_counter()
        self.push_log.extend((now, bucket.name) for bucket in buckets)
        operation = self.client.push_pull([b.tensor_id for b in buckets], gradients,
                                          [self._pull_target(b) for b in buckets], self.step)
        for bucket in buckets:
            bucket.operation = operation

    def _gradient(self, bucket):
        """The bucket's gradient as one contiguous tensor (packed buckets: copied together)."""
        if bucket.direct:
            p = bucket.params[0]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            return p.grad
        offset = 0
        for p in bucket.params:
            n = p.numel()
            if p.grad is None:
                bucket.gradient[offset:offset + n].zero_()
            else:
                bucket.gradient[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        return bucket.gradient

    def _pull_target(self, bucket, initial=False):
        if bucket.direct:
            if initial or self.mode == "server":
                return bucket.params[0].data  # the new weights go straight into the parameter
            # The sum replaces the gradient it was pushed from: the shard answers only after it
            # has received every worker's push, so the push no longer reads it by then.
            return bucket.params[0].grad
        return bucket.out

    def finish(self):
        """Starts the buckets still waiting, waits for all, writes the results back."""
        with self._lock:
            waiting = [bucket for bucket in self.buckets if bucket.operation is None]
            if waiting:
                self._launch(*waiting)
            operations = list({id(b.operation): b.operation for b in self.buckets}.values())
        try:
            hetps.wait_all(operations)
        finally:
            with self._lock:
                for bucket in self.buckets:
                    bucket.operation = None
                    bucket.ready.clear()
                self._step_started = False
        for bucket in self.buckets:
            if self.mode == "server":
                self._unpack_weights(bucket)
            else:
                self._unpack_sum(bucket)
        self.step += 1

    def _unpack_weights(self, bucket, initial=False):
        if bucket.direct:
            return  # pulled in place
        offset = 0
        with torch.no_grad():
            for p in bucket.params:
                n = p.numel()
                p.copy_(bucket.out[offset:offset + n].view_as(p))
                offset += n

    def _unpack_sum(self, bucket):
        scale = 1.0 / self.world_size if self.average else 1.0
        offset = 0
        for p in bucket.params:
            n = p.numel()
            if not bucket.direct:  # a direct bucket's sum is in .grad already
                summed = bucket.out[offset:offset + n].view_as(p)
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                p.grad.copy_(summed)
            if scale != 1.0:
                p.grad.mul_(scale)
            offset += n

    def _sync_hyperparameters(self):
        """Sends the groups' changed hyperparameters (an LR scheduler's new lr) for this step,
        before its first push. REQUIRES: self._lock is held."""
        if self.mode != "server":
            return
        for group in {b.group for b in self.buckets}:
            _, params = self._rules(group)
            sent = self._sent_params.get(group)
            changes = {k: v for k, v in params.items() if sent is None or sent.get(k) != v}
            if not changes:
                continue
            for bucket in self.buckets:
                if bucket.group == group:
                    self.client.set_hyperparameters(bucket.tensor_id, self.step, changes)
            self._sent_params[group] = params

    def hyperparameters_changed_late(self):
        """Whether a group's hyperparameters changed after this step's pushes began."""
        if self.mode != "server" or not self._step_started:
            return False
        return any(self._rules(g)[1] != self._sent_params.get(g)
                   for g in {b.group for b in self.buckets})


def check_parameter(name, p):
    if p.device.type not in ("cpu", "cuda"):
        raise ValueError(f"parameter {name} is on {p.device}: hetps.torch moves CPU and CUDA "
                         "tensors")
    if p.device.type == "cuda" and p.dtype != torch.float32:
        raise ValueError(f"parameter {name} is a {p.dtype} CUDA tensor: GPU memory moves as "
                         "float32 only")
    if p.dtype not in _TORCH_TO_WIRE:
        raise ValueError(f"parameter {name} is {p.dtype}: hetps takes float32, bfloat16 or "
                         "float16")
    if not p.is_contiguous():
        raise ValueError(f"parameter {name} is not contiguous")

