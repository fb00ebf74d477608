"""Trains a small MLP on scikit-learn's digits (no download) with hetps.

    python -m hetps.run --shards 2 --workers 2 -- python python/examples/train_digits.py

Each worker takes its share of every batch. --mode server runs Adam on the shards
(hetps.torch.ServerOptimizer) with a StepLR schedule; --mode sum sums the gradients on the
shards and runs torch's SGD with momentum locally (hetps.torch.DistributedOptimizer). Rank 0
prints the test accuracy; --save writes the final weights (torch.save of the state dict).
"""

import argparse
import os

import torch

import hetps
import hetps.torch

BATCH = 64
TRAIN_ROWS = 1500


def load_digits():
    """(train_x, train_y, test_x, test_y) as tensors, the same on every worker."""
    from sklearn.datasets import load_digits as sklearn_digits
    digits = sklearn_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return x[:TRAIN_ROWS], y[:TRAIN_ROWS], x[TRAIN_ROWS:], y[TRAIN_ROWS:]


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def batch_share(x, y, step, rank, world_size):
    """This worker's rows of the step's batch: every world_size-th row from its rank on."""
    begin = (step * BATCH) % (TRAIN_ROWS - BATCH + 1)
    rows = slice(begin + rank, begin + BATCH, world_size)
    return x[rows], y[rows]


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def make_optimizer(mode, model, lr, client=None):
    if mode == "server":
        return hetps.torch.ServerOptimizer(model.named_parameters(), "adam", lr=lr,
                                           client=client)
    local = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return hetps.torch.DistributedOptimizer(local, model.named_parameters(), client=client)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["server", "sum"], default="server")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    lr = args.lr if args.lr is not None else (0.01 if args.mode == "server" else 0.1)

    torch.set_num_threads(1)
    options = hetps.options_from_env()
    rank, world_size = options.rank, options.world_size
    train_x, train_y, test_x, test_y = load_digits()
    # Each worker starts from its own random weights; the optimizer gives all rank 0's.
    model = make_model(seed=rank)
    client = hetps.Client(options)
    optimizer = make_optimizer(args.mode, model, lr, client)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=80, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(args.steps):
        x, y = batch_share(train_x, train_y, step, rank, world_size)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if rank == 0 and step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"test accuracy {accuracy(model, test_x, test_y):.4f}", flush=True)
    if args.save:
        torch.save(model.state_dict(), args.save)
    client.barrier()  # nobody leaves while another still pulls
    client.shutdown()


if __name__ == "__main__":
    main()
