"""hetps.Client against real ps-server processes: values, dtypes, lifetimes, errors."""

import contextlib
import gc
import os
import threading
import time
import urllib.request
import weakref

import numpy as np
import pytest
import torch

import hetps
from conftest import TRANSPORTS, client_for


def eventually(predicate, timeout=10.0):
    """Waits (bounded) until predicate() holds; the deadline is what fails a test, not a sleep."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def two_workers(cluster_factory):
    """Both workers' clients of a two-worker job, in this process, and their ids of one tensor
    of 64 zeros summed by the shard."""
    cluster = cluster_factory(workers=2)
    clients = [client_for(cluster, rank=r) for r in range(2)]
    try:
        yield clients, [c.declare("w", initial_values=np.zeros(64, np.float32), optimizer="sum")
                        for c in clients]
    finally:
        for c in clients:
            c.shutdown()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_numpy_and_torch_round_trip_in_place(cluster_factory, transport):
    cluster = cluster_factory(shards=2, workers=1, transport="ucx" if "ucx" in TRANSPORTS else None)
    with client_for(cluster, transport=transport, partition_bytes=1024) as client:
        initial = np.arange(1000, dtype=np.float32)
        w = client.declare("w", initial_values=initial, optimizer="sum")
        assert len(client.partitions(w)) > 1  # spread over both shards
        out = np.zeros(1000, np.float32)
        client.pull(w, out).wait()
        np.testing.assert_array_equal(out, initial)
        # Sum-only BSP, one worker: version 1 holds the step's gradient.
        gradient = torch.linspace(-1, 1, 1000)
        weights = torch.zeros(1000)
        client.push_pull(w, gradient, weights, 0).wait()
        assert torch.equal(weights, gradient)


def test_16_bit_types_travel_and_convert(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        values = np.linspace(-2, 2, 256).astype(np.float32)
        w = client.declare("w", initial_values=values, optimizer="sum", push_dtype="bf16",
                           pull_dtype="fp16")
        # Weights travel as fp16 and are converted to what the caller passed.
        as_bf16 = torch.zeros(256, dtype=torch.bfloat16)
        client.pull(w, as_bf16).wait()
        assert torch.equal(as_bf16, torch.from_numpy(values).half().bfloat16())
        as_fp16 = np.zeros(256, np.float16)
        client.pull(w, as_fp16).wait()
        np.testing.assert_array_equal(as_fp16, values.astype(np.float16))
        gradient = torch.full((256,), 0.5, dtype=torch.bfloat16)
        after = torch.zeros(256)
        client.push_pull(w, gradient, after, 0).wait()
        assert torch.equal(after, torch.full((256,), 0.5))


def test_many_tensors_in_one_call(cluster_factory):
    cluster = cluster_factory(shards=2)
    with client_for(cluster) as client:
        ids = [client.declare(f"t{i}", 10 + i, optimizer="sum") for i in range(5)]
        gradients = [torch.full((10 + i,), float(i)) for i in range(5)]
        outs = [torch.zeros(10 + i) for i in range(5)]
        client.push_pull(ids, gradients, outs, 0).wait()
        for i in range(5):
            assert torch.equal(outs[i], gradients[i])
        with pytest.raises(hetps.Error, match="as many arrays"):
            client.push(ids, gradients[:2], 1)


def test_server_side_optimizer_and_hyperparameters(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", initial_values=np.ones(8, np.float32), optimizer="sgd",
                           params={"lr": 0.5})
        client.set_hyperparameters(w, 1, {"lr": 0.25})
        weights = np.zeros(8, np.float32)
        client.push_pull(w, np.ones(8, np.float32), weights, 0).wait()
        np.testing.assert_allclose(weights, 0.5)  # 1 - 0.5 * 1
        client.push_pull(w, np.ones(8, np.float32), weights, 1).wait()
        np.testing.assert_allclose(weights, 0.25)  # 0.5 - 0.25 * 1, the lr from step 1
        stats = client.stats()
        assert [s.shard_index for s in stats] == [0]
        assert stats[0].num_tensors == 1 and stats[0].max_version == 2


def test_waits_release_the_gil_and_memory_outlives_the_handle(cluster_factory):
    # Two workers in one process: worker 0's pull of version 1 waits for worker 1's push, which
    # another Python thread makes while worker 0 is blocked in wait() (a held GIL would hang
    # here, until the ctest timeout).
    with two_workers(cluster_factory) as (clients, ids):
        out = torch.zeros(64)
        out_ref = weakref.ref(out)
        called = []
        pull = clients[0].pull(
            ids[0], out, min_version=1,
            callback=lambda op: called.append((op.exception(), out_ref().clone())))
        del out
        gc.collect()
        assert out_ref() is not None, "the pull's memory was freed while the pull waits"
        assert not pull.done()

        pushed = threading.Event()

        def push_both():
            ops = [c.push(i, np.full(64, 1.0, np.float32), 0) for c, i in zip(clients, ids)]
            hetps.wait_all(ops)
            pushed.set()

        thread = threading.Thread(target=push_both)
        thread.start()
        pull.wait()
        thread.join(30)
        assert pushed.is_set()
        del pull
        assert eventually(lambda: len(called) == 1)
        assert called[0][0] is None
        assert torch.equal(called[0][1], torch.full((64,), 2.0))
        gc.collect()
        assert eventually(lambda: out_ref() is None), "the pull kept its memory after it ended"


def test_a_thread_in_wait_finishes_the_operation_itself(cluster_factory):
    # Handing the ended operation to the callback thread would wake that thread just as the
    # waiter wants the GIL back: the waiter runs the callbacks and lets go of the arrays itself.
    with two_workers(cluster_factory) as (clients, ids):
        ran_on = []
        pull = clients[0].pull(ids[0], torch.zeros(64), min_version=1,
                               callback=lambda op: ran_on.append(threading.get_ident()))
        saw_waiter = []

        def push_once_waited_for():
            # The pull ends with version 1, after both pushes: only once the main thread waits.
            saw_waiter.append(eventually(lambda: pull._waiters == 1))
            hetps.wait_all([c.push(i, np.ones(64, np.float32), 0) for c, i in zip(clients, ids)])

        thread = threading.Thread(target=push_once_waited_for)
        thread.start()
        pull.wait()
        thread.join(30)
        assert saw_waiter == [True]
        assert eventually(lambda: len(ran_on) == 1)
        assert ran_on == [threading.get_ident()], "the callback ran on another thread"


def test_an_ended_operation_is_finished_by_its_handle_not_the_callback_thread(cluster_factory):
    # With a handle alive and no callback, the next to look at the ended operation finishes it
    # (wait(), add_done_callback(), the handle's end); the callback thread would take the GIL.
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", initial_values=np.arange(4, dtype=np.float32), optimizer="sum")
        posted = hetps._hetps._callbacks_posted()
        outs = [torch.zeros(4) for _ in range(3)]
        dropped = weakref.ref(outs[2])
        ops = [client.pull(w, out) for out in outs]
        del outs
        assert eventually(lambda: all(op.done() for op in ops))
        ops[0].wait()
        seen = []
        ops[1].add_done_callback(seen.append)
        assert seen == [ops[1]], "a callback added after the end runs at once"
        assert dropped() is not None, "the array was let go before its operation was finished"
        del ops[2]
        gc.collect()
        assert dropped() is None, "the handle's end did not let go of the array"
        assert hetps._hetps._callbacks_posted() == posted


def test_callbacks_run_once_even_when_added_late(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", 4, optimizer="sum")
        seen = []
        op = client.pull(w, np.zeros(4, np.float32))
        op.add_done_callback(lambda o: seen.append(("early", o is op)))
        op.wait()
        assert eventually(lambda: len(seen) == 1)
        op.add_done_callback(lambda o: seen.append(("late", o is op)))
        assert seen == [("early", True), ("late", True)]
        assert op.done() and op.exception() is None


@pytest.mark.parametrize("make, words", [
    (lambda: torch.zeros(8, 2).t(), "not contiguous"),
    (lambda: torch.zeros(16, dtype=torch.float64), "float64"),
    (lambda: np.zeros(16, np.int32), "format"),
    (lambda: torch.zeros(16, device="meta"), "meta tensor"),
    (lambda: torch.zeros(15), "16 elements expected, 15"),
    (lambda: [1.0] * 16, "list"),
])
def test_bad_arrays_are_refused_at_the_call(cluster_factory, make, words):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", 16, optimizer="sum")
        with pytest.raises(hetps.Error, match=words) as raised:
            client.push(w, make(), 0)
        assert raised.value.code == "INVALID_ARGUMENT"
        # The client still works.
        out = np.ones(16, np.float32)
        client.pull(w, out).wait()
        np.testing.assert_array_equal(out, 0)


def test_pulling_into_what_cannot_be_written_is_refused(cluster_factory):
    cluster = cluster_factory()
    with client_for(cluster) as client:
        w = client.declare("w", 16, optimizer="sum")
        with pytest.raises(hetps.Error, match="requires grad"):
            client.pull(w, torch.zeros(16, requires_grad=True))
        read_only = np.zeros(16, np.float32)
        read_only.setflags(write=False)
        with pytest.raises(hetps.Error, match="cannot write"):
            client.pull(w, read_only)
        with pytest.raises(hetps.Error, match="not declared") as raised:
            client.pull(12345, np.zeros(16, np.float32))
        assert raised.value.code == "NOT_FOUND"


def test_calls_after_shutdown_fail_clearly(cluster_factory):
    cluster = cluster_factory()
    client = client_for(cluster)
    w = client.declare("w", 4, optimizer="sum")
    client.shutdown()
    client.shutdown()  # idempotent
    with pytest.raises(hetps.Error, match="shut down") as raised:
        client.pull(w, np.zeros(4, np.float32))
    assert raised.value.code == "FAILED_PRECONDITION"


def test_unreachable_shards_fail_within_the_deadline():
    options = hetps.ClientOptions(servers=["127.0.0.1:1"], connect_timeout=2.0)
    start = time.monotonic()
    with pytest.raises(hetps.Error) as raised:
        hetps.Client(options)
    assert raised.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    assert "127.0.0.1:1" in raised.value.message
    assert time.monotonic() - start < 10


def test_a_shard_with_a_token_refuses_a_client_without_it(cluster_factory, tmp_path,
                                                           monkeypatch):
    token = tmp_path / "job.token"
    token.write_text("the-secret\n")
    monkeypatch.delenv("HETPS_AUTH_TOKEN", raising=False)
    cluster = cluster_factory(extra_flags=[f"--auth_token_file={token}"])
    with pytest.raises(hetps.Error) as raised:
        client_for(cluster)
    assert raised.value.code == "UNAUTHENTICATED"
    assert "the-secret" not in str(raised.value)
    with client_for(cluster, auth_token_file=str(token)) as client:
        assert client.stats()[0].shard_index == 0


def test_a_worker_serves_its_metrics_when_asked(cluster_factory, monkeypatch):
    cluster = cluster_factory()
    with client_for(cluster) as quiet:
        assert quiet.metrics_address == ""
    with client_for(cluster, metrics_port=0, metrics_host="127.0.0.1") as client:
        w = client.declare("w", 64, optimizer="sum")
        weights = np.zeros(64, np.float32)
        for step in range(3):
            client.push_pull(w, np.ones(64, np.float32), weights, step).wait()
        page = urllib.request.urlopen(f"http://{client.metrics_address}/metrics",
                                      timeout=10).read().decode()
        assert 'hetps_client_operations_total{op="push_pull",code="OK"} 3\n' in page
        assert "hetps_client_ps_wait_seconds_total " in page
    monkeypatch.setenv("HETPS_SERVERS", "a:1")
    monkeypatch.setenv("HETPS_METRICS_PORT", "9464")
    assert hetps.options_from_env().metrics_port == 9464


def test_options_from_the_environment(monkeypatch):
    monkeypatch.setenv("HETPS_SERVERS", "a:1,b:2")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    options = hetps.options_from_env(job_id="j")
    assert (options.servers, options.rank, options.world_size, options.job_id) == (
        ["a:1", "b:2"], 3, 4, "j")
    monkeypatch.setenv("HETPS_RANK", "1")
    assert hetps.ClientOptions.from_env().rank == 1
    monkeypatch.delenv("HETPS_SERVERS")
    with pytest.raises(ValueError, match="HETPS_SERVERS"):
        hetps.options_from_env()
    with pytest.raises(TypeError):
        hetps.ClientOptions(no_such_field=1)


def test_dropped_tensors_leave_the_shards_and_their_names_are_free(cluster_factory):
    cluster = cluster_factory(shards=2)
    with client_for(cluster) as client, client_for(cluster, admin=True) as operator:
        w = client.declare("w", 1000, optimizer="adam", params={"lr": 0.01})
        client.declare("kept", 10, optimizer="sum")
        client.push_pull(w, torch.ones(1000), torch.zeros(1000), 0).wait()
        dropped = operator.drop(["w", "never-declared"])
        assert dropped.tensors == 1 and dropped.released_bytes > 1000 * 3 * 4
        assert [s.num_tensors for s in client.stats()] == [1, 1]
        assert sum(s.tensors_dropped for s in client.stats()) == 2
        with pytest.raises(hetps.Error, match="NOT_FOUND"):
            client.push(w, torch.ones(1000), 1).wait()
        w = client.declare("w", 500, optimizer="sgd", params={"lr": 0.1})  # another spec
        weights = torch.full((500,), -1.0)
        client.pull(w, weights).wait()
        assert torch.equal(weights, torch.zeros(500))
        assert client.drop_all().tensors == 2
        assert [s.num_tensors for s in operator.stats()] == [0, 0]


def test_type_stubs_name_what_the_module_has():
    import ast
    import inspect
    from hetps import _hetps
    with open(os.path.join(os.path.dirname(hetps.__file__), "_hetps.pyi")) as f:
        tree = ast.parse(f.read())
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            stubbed[node.name] = set()
    public = {name for name in dir(_hetps) if not name.startswith("__")}
    assert set(stubbed) == public
    for name, members in stubbed.items():
        if inspect.isclass(getattr(_hetps, name)) and name != "Error":
            have = {m for m in dir(getattr(_hetps, name)) if not m.startswith("__")}
            assert members - {"__init__", "__enter__", "__exit__"} == have - {"_pybind11_conduit_v1_"}, name


def test_shards_restored_from_a_checkpoint_tell_the_step_to_resume_from(cluster_factory, tmp_path):
    checkpoints = str(tmp_path / "checkpoints")
    n = 4096  # four partitions of 4 KiB, on both shards
    initial = np.arange(n, dtype=np.float32)
    first = cluster_factory(shards=2, extra_flags=["--checkpoint_every=2",
                                                  f"--checkpoint_dir={checkpoints}"])
    out = np.empty(n, np.float32)
    with client_for(first, partition_bytes=4096) as client:
        assert client.resume_step == 0
        w = client.declare("w", initial_values=initial, optimizer="sgd", params={"lr": 1.0})
        for step in range(3):
            client.push_pull(w, np.ones(n, np.float32), out, step).wait()
        manifest = os.path.join(checkpoints, "step-000000000002", "MANIFEST")
        assert eventually(lambda: os.path.exists(manifest))  # every 2 steps, in the background
        client.checkpoint(3)  # on demand: committed when it returns
        assert os.path.exists(os.path.join(checkpoints, "step-000000000003", "MANIFEST"))
        assert [s.last_checkpoint for s in client.stats()] == [3, 3]
    first.close()

    restored = cluster_factory(shards=2, extra_flags=[f"--restore={checkpoints}"])
    with client_for(restored, partition_bytes=4096) as client:
        assert client.resume_step == 3
        w = client.declare("w", initial_values=initial, optimizer="sgd", params={"lr": 1.0})
        client.pull(w, out, min_version=client.resume_step).wait()
        np.testing.assert_array_equal(out, initial - 3)
        with pytest.raises(hetps.Error) as raised:
            client.checkpoint(1)  # these shards keep no checkpoints
        assert raised.value.code == "FAILED_PRECONDITION"
