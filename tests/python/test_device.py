"""GPU arrays through the device client: torch CUDA tensors and __cuda_array_interface__.

Without a GPU (or in a build without CUDA) the checks made at the call still run, and a
well-formed GPU array is refused with FAILED_PRECONDITION; the transfers themselves need a
GPU and skip, saying so, without one."""

import ctypes
import glob

import numpy as np
import pytest
import torch

import hetps
import hetps.torch
from conftest import client_for


def load_cudart():
    """CUDA's runtime library, or None."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    names += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


CUDART = load_cudart()


def gpu_count():
    if CUDART is None:
        return 0
    count = ctypes.c_int(0)
    return count.value if CUDART.cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0


HAVE_GPU = gpu_count() > 0
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device here (cudaGetDeviceCount "
                               "found none, or no libcudart): GPU transfers are not tested")


class GpuArray:
    """float32 device memory from cudaMalloc, exposed through __cuda_array_interface__ (v3)."""

    def __init__(self, values, stream=None, readonly=False):
        values = np.ascontiguousarray(values, np.float32)
        self.size = values.size
        self.pointer = ctypes.c_void_p()
        assert CUDART.cudaMalloc(ctypes.byref(self.pointer), max(values.nbytes, 4)) == 0
        assert CUDART.cudaMemcpy(self.pointer, values.ctypes.data_as(ctypes.c_void_p),
                                 ctypes.c_size_t(values.nbytes), 1) == 0  # host to device
        self.__cuda_array_interface__ = {
            "version": 3, "typestr": "<f4", "shape": (self.size,), "strides": None,
            "data": (self.pointer.value, readonly), "stream": stream}

    def numpy(self):
        out = np.empty(self.size, np.float32)
        assert CUDART.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), self.pointer,
                                 ctypes.c_size_t(out.nbytes), 2) == 0  # device to host
        return out

    def __del__(self):
        if self.pointer.value:
            CUDART.cudaFree(self.pointer)


class FakeGpuArray:
    """The protocol without memory behind it: for the checks made before any transfer."""

    def __init__(self, size=16, typestr="<f4", strides=None, readonly=False, stream=None,
                 pointer=0x1000):
        self.__cuda_array_interface__ = {
            "version": 3, "typestr": typestr, "shape": (size,), "strides": strides,
            "data": (pointer, readonly), "stream": stream}


@pytest.mark.parametrize("make, words", [
    (lambda: FakeGpuArray(typestr="<f8"), "float32"),
    (lambda: FakeGpuArray(typestr="<f2"), "float32"),
    (lambda: FakeGpuArray(strides=(8,)), "not C-contiguous"),
    (lambda: FakeGpuArray(size=15), "16 elements expected, 15"),
    (lambda: FakeGpuArray(stream=0), "stream is 0"),
    (lambda: FakeGpuArray(pointer=0), "pointer is null"),
])
def test_bad_gpu_arrays_are_refused_at_the_call(cluster_factory, make, words):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", 16, optimizer="sum")
        with pytest.raises(hetps.Error, match=words) as raised:
            client.push(w, make(), 0)
        assert raised.value.code == "INVALID_ARGUMENT"
        out = np.ones(16, np.float32)
        client.pull(w, out).wait()  # the client still works
        np.testing.assert_array_equal(out, 0)


def test_one_call_moves_host_or_gpu_arrays_on_one_stream(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        a = client.declare("a", 16, optimizer="sum")
        b = client.declare("b", 16, optimizer="sum")
        with pytest.raises(hetps.Error, match="not both"):
            client.push([a, b], [np.zeros(16, np.float32), FakeGpuArray()], 0)
        with pytest.raises(hetps.Error, match="not both"):
            client.push_pull(a, np.zeros(16, np.float32), FakeGpuArray(), 0)
        with pytest.raises(hetps.Error, match="one stream"):
            client.push([a, b], [FakeGpuArray(stream=5), FakeGpuArray(stream=7)], 0)
        with pytest.raises(hetps.Error, match="read-only"):
            client.pull(a, FakeGpuArray(readonly=True))


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is here: the transfer tests below cover it")
def test_gpu_arrays_without_a_gpu_fail_clearly(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", 16, optimizer="sum")
        with pytest.raises(hetps.Error) as raised:
            client.push(w, FakeGpuArray(), 0)
        assert raised.value.code == "FAILED_PRECONDITION", raised.value.message
        out = np.ones(16, np.float32)
        client.pull(w, out).wait()
        np.testing.assert_array_equal(out, 0)


@needs_gpu
def test_gpu_arrays_push_and_pull_through_the_device_client(cluster_factory):
    cluster = cluster_factory(shards=2, workers=1)
    n = 300_000  # several partitions on each shard
    with client_for(cluster, partition_bytes=256 << 10) as client:
        initial = np.arange(n, dtype=np.float32)
        w = client.declare("w", initial_values=initial, optimizer="sgd", params={"lr": 0.5})
        gradient = GpuArray(np.full(n, 2.0, np.float32))
        weights = GpuArray(np.zeros(n, np.float32))
        client.push_pull(w, gradient, weights, 0).wait()
        np.testing.assert_array_equal(weights.numpy(), initial - 1.0)
        again = GpuArray(np.zeros(n, np.float32), stream=1)  # the legacy default stream
        client.pull(w, again, min_version=1).wait()
        np.testing.assert_array_equal(again.numpy(), initial - 1.0)
        client.push(w, gradient, 1).wait()
        client.pull(w, weights, min_version=2).wait()
        np.testing.assert_array_equal(weights.numpy(), initial - 2.0)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="torch has no CUDA here (Debian's python3-torch is a CPU build)")
def test_torch_cuda_tensors_are_ordered_on_the_current_stream(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        n = 1 << 20
        w = client.declare("w", initial_values=np.ones(n, np.float32), optimizer="sum")
        gradient = torch.full((n,), 3.0, device="cuda")
        weights = torch.zeros(n, device="cuda")
        client.push_pull(w, gradient, weights, 0)
        # Queued after the call on the same stream: runs once the weights are in place.
        doubled = weights * 2
        assert torch.equal(doubled.cpu(), torch.full((n,), 6.0))  # the sum of one worker, x2
        with pytest.raises(hetps.Error, match="float32 only"):
            client.push(w, gradient.half(), 1)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="torch has no CUDA here (Debian's python3-torch is a CPU build)")
def test_a_cuda_model_trains_like_the_same_model_on_the_cpu(cluster_factory):
    def train(device, cluster):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 10)).to(device)
        data = torch.randn(32, 64, generator=torch.Generator().manual_seed(1)).to(device)
        with client_for(cluster) as client:
            optimizer = hetps.torch.ServerOptimizer(model.named_parameters(), "adam", lr=0.01,
                                                    client=client, bucket_bytes=64 << 10)
            for _ in range(5):
                optimizer.zero_grad()
                model(data).square().mean().backward()
                optimizer.step()
            return [p.detach().cpu() for p in model.parameters()]

    on_gpu = train("cuda", cluster_factory())
    on_cpu = train("cpu", cluster_factory())
    for gpu, cpu in zip(on_gpu, on_cpu):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)
