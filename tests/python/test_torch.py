"""hetps.torch and hetps.run: training runs that must equal a single process's, overlap of
pushes with backward, schedules, bad use, and the launcher's failure handling."""

import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import hetps
import hetps.torch
from conftest import client_for

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "python", "examples")
sys.path.insert(0, EXAMPLES)
import train_digits  # noqa: E402


def run_job(tmp_path, mode, steps=200):
    """2 workers x 2 shards through hetps.run; returns (rank 0's output, final weights)."""
    save = tmp_path / "weights.pt"
    # Rank 0 saves; both run the same script.
    result = subprocess.run(
        [sys.executable, "-m", "hetps.run", "--shards", "2", "--workers", "2", "--",
         sys.executable, os.path.join(EXAMPLES, "train_digits.py"), "--mode", mode,
         "--steps", str(steps), "--save", str(save)],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, torch.load(save)


def reference(mode, steps=200, world_size=2):
    """One process: rank 0's initial weights, each step the workers' gradients summed in rank
    order, then torch's own optimizer: what the job must reproduce."""
    train_x, train_y, _, _ = train_digits.load_digits()
    model = train_digits.make_model(seed=0)
    lr = 0.01 if mode == "server" else 0.1
    if mode == "server":
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=80, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        summed = None
        for rank in range(world_size):
            model.zero_grad()
            x, y = train_digits.batch_share(train_x, train_y, step, rank, world_size)
            loss_fn(model(x), y).backward()
            grads = [p.grad.clone() for p in model.parameters()]
            summed = grads if summed is None else [a + b for a, b in zip(summed, grads)]
        for p, g in zip(model.parameters(), summed):
            p.grad = g if mode == "server" else g * (1.0 / world_size)
        optimizer.step()
        scheduler.step()
    return model.state_dict()


def assert_weights_equal(actual, expected):
    for name, want in expected.items():
        got = actual[name]
        # Within 1e-5 relative, or 1e-6 absolute for tiny values.
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (
            name, (got - want).abs().max().item())


@pytest.mark.parametrize("mode", ["server", "sum"])
def test_two_workers_train_digits_like_one_process(tmp_path, mode):
    output, weights = run_job(tmp_path, mode)
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", output).group(1))
    assert accuracy >= 0.9, output
    assert_weights_equal(weights, reference(mode))


class Deep(torch.nn.Module):
    """Layers large enough to be buckets of their own; the input's gradient is the last thing
    backward computes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])

    def forward(self, x):
        return self.layers(x)


def test_pushes_start_before_backward_ends(cluster_factory):
    cluster = cluster_factory(shards=2)
    model = Deep()
    with client_for(cluster) as client:
        optimizer = hetps.torch.ServerOptimizer(model.named_parameters(), "sgd", lr=0.1,
                                                client=client, bucket_bytes=64 << 10)
        for _ in range(3):
            x = torch.randn(32, 256, requires_grad=True)
            ended = []
            x.register_hook(lambda g: ended.append(time.perf_counter()))
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            starts = [t for t, _ in optimizer.push_log]
            assert len(starts) == 7  # 6 weights of 256 KiB each, and the biases packed in one
            # Every bucket but the last to fill started before backward reached the input.
            assert sum(t < ended[0] for t in starts) >= 6, (starts, ended)


def test_a_schedule_reaches_the_shards_at_the_right_step(cluster_factory):
    cluster = cluster_factory()
    torch.manual_seed(1)
    model = torch.nn.Linear(8, 4)
    mirror = torch.nn.Linear(8, 4)
    mirror.load_state_dict(model.state_dict())
    with client_for(cluster) as client:
        optimizer = hetps.torch.ServerOptimizer(model.parameters(), "sgd", lr=0.5, momentum=0.9,
                                                nesterov=True, client=client)
        local = torch.optim.SGD(mirror.parameters(), lr=0.5, momentum=0.9, nesterov=True)
        schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s))
                     for o in (optimizer, local)]
        for step in range(6):
            x = torch.randn(16, 8)
            for m, o in ((model, optimizer), (mirror, local)):
                o.zero_grad()
                m(x).square().sum().backward()
                o.step()
            for schedule in schedules:
                schedule.step()
            for a, b in zip(model.parameters(), mirror.parameters()):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), step
        assert optimizer.steps == 6
        # The shards' momentum is torch's.
        state = optimizer.state_dict()
        assert state["hetps_step"] == 6 and state["param_groups"][0]["momentum"] == 0.9
        for i, p in enumerate(mirror.parameters()):
            assert torch.allclose(state["state"][i]["momentum_buffer"],
                                  local.state[p]["momentum_buffer"], rtol=1e-5, atol=1e-6)


def test_state_dict_round_trips_through_torch_save(cluster_factory):
    """A checkpoint of model and optimizer, restored into a fresh cluster and fresh weights,
    goes on exactly like the run it was taken from; it also loads into torch.optim.Adam."""
    torch.manual_seed(2)
    data = [(torch.randn(16, 8), torch.randn(16, 4)) for _ in range(6)]

    def train(model, optimizer, batches):
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    first = cluster_factory()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    with client_for(first) as client:
        optimizer = hetps.torch.ServerOptimizer(model.named_parameters(), "adam", lr=0.05,
                                                amsgrad=True, client=client)
        train(model, optimizer, data[:3])
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        train(model, optimizer, data[3:])
        expected = [p.detach().clone() for p in model.parameters()]

    buffer.seek(0)
    checkpoint = torch.load(buffer)
    assert checkpoint["optimizer"]["hetps_step"] == 3
    assert set(checkpoint["optimizer"]["state"][0]) == {"step", "exp_avg", "exp_avg_sq",
                                                        "max_exp_avg_sq"}
    second = cluster_factory()
    torch.manual_seed(99)  # other initial weights, which the checkpoint replaces
    restored = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 4))
    with client_for(second) as client:
        optimizer = hetps.torch.ServerOptimizer(restored.named_parameters(), "adam", lr=0.05,
                                                amsgrad=True, client=client)
        restored.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        assert optimizer.steps == 3
        train(restored, optimizer, data[3:])
        for got, want in zip(restored.parameters(), expected):
            assert torch.equal(got, want)

    # torch's own Adam takes the same checkpoint.
    local = torch.optim.Adam(restored.parameters(), lr=0.05, amsgrad=True)
    local.load_state_dict({k: v for k, v in checkpoint["optimizer"].items()
                           if k != "hetps_step"})
    assert torch.equal(local.state[next(restored.parameters())]["exp_avg"],
                       checkpoint["optimizer"]["state"][0]["exp_avg"])


def test_bad_use_gets_clear_errors(cluster_factory):
    cluster = cluster_factory()
    model = torch.nn.Linear(4, 2)
    with client_for(cluster) as client:
        with pytest.raises(ValueError, match="rule is one of"):
            hetps.torch.ServerOptimizer(model.parameters(), "lbfgs", client=client)
        with pytest.raises(TypeError, match="needs lr"):
            hetps.torch.ServerOptimizer(model.parameters(), "sgd", client=client)
        with pytest.raises(TypeError, match="betas"):
            hetps.torch.ServerOptimizer(model.parameters(), "sgd", lr=0.1, betas=(0.9, 0.9),
                                        client=client)
        with pytest.raises(ValueError, match="float64"):
            hetps.torch.ServerOptimizer(torch.nn.Linear(4, 2).double().parameters(), "sgd",
                                        lr=0.1, client=client)
        with pytest.raises(ValueError, match="moves CPU and CUDA"):
            hetps.torch.ServerOptimizer(torch.nn.Linear(4, 2, device="meta").parameters(), "sgd",
                                        lr=0.1, client=client)
        optimizer = hetps.torch.ServerOptimizer(model.parameters(), "sgd", lr=0.1,
                                                client=client)
        client.shutdown()
        # The push starts in backward: the error comes from there.
        with pytest.raises(hetps.Error) as raised:
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
        assert raised.value.code == "FAILED_PRECONDITION"


def launch(tmp_path, script, workers=2, extra=()):
    path = tmp_path / "worker.py"
    path.write_text(script)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hetps.run", "--shards", "2", "--workers", str(workers), *extra,
         "--", sys.executable, str(path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return result, time.monotonic() - start


def test_the_launcher_gives_each_worker_its_place(tmp_path):
    result, _ = launch(tmp_path, """
import os, hetps
options = hetps.options_from_env()
client = hetps.Client(options)  # the shards require the job's token: it must be there
with open(f"rank{options.rank}", "w") as f:
    f.write(" ".join([os.environ["RANK"], os.environ["WORLD_SIZE"], str(len(options.servers)),
                      str(client.stats()[1].shard_index)]))
client.barrier()
""")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(re.findall(r"shard \d listens on 127.0.0.1:\d+", result.stdout)) == 2
    for rank in range(2):
        assert (tmp_path / f"rank{rank}").read_text() == f"{rank} 2 2 1"


def test_a_failing_worker_stops_the_job_with_its_status(tmp_path):
    result, elapsed = launch(tmp_path, """
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(100)
""")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "worker 1 exited with status 3" in result.stderr
    assert elapsed < 60  # rank 0 was stopped, not waited for


def test_the_launcher_refuses_a_missing_command():
    result = subprocess.run([sys.executable, "-m", "hetps.run", "--shards", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "command" in result.stderr


def test_the_launcher_passes_signals_on_to_the_workers(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("""
import os, signal, sys, time
rank = os.environ["RANK"]
def stop(signum, frame):
    open(f"got{rank}", "w").write(str(signum))
    sys.exit(7)
signal.signal(signal.SIGINT, stop)
open(f"ready{rank}", "w").close()
time.sleep(100)
""")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "hetps.run", "--shards", "1", "--workers", "2", "--",
         sys.executable, str(script)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{r}").exists() for r in range(2)):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.05)
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 7, out + err
    for rank in range(2):
        assert (tmp_path / f"got{rank}").read_text() == str(int(signal.SIGINT))
