"""A small DDP training run whose gradients go through inasched; ``torchrun``-compatible.

    torchrun --nproc-per-node 2 -m workers.train_example --config 'worker{rank}.json'
    torchrun --nproc-per-node 2 -m workers.train_example --service URL --job 3 --token T
    torchrun --nproc-per-node 2 -m workers.train_example --comm gloo      # the reference run

An MLP learns a fixed random teacher on synthetic data (nothing is downloaded); every rank
draws its own batches from a seed, so an inasched run and a gloo run see the same data and
their loss curves differ only by quantization. Rank 0 prints one JSON line per step:
``{"step": 0, "loss": 1.23}``. RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the
environment as torchrun sets them; the gloo process group does DDP's bookkeeping (the initial
parameter broadcast) either way.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workers.client import AllreduceClient, open_socket
from workers.errors import WorkerError
from workers.rendezvous import join, load_config
from workers.torch_hook import register

log = logging.getLogger(__name__)
# The loss curve is this program's output (one JSON line per step on stdout), kept apart from
# diagnostics so a caller can parse it.
losses = logging.getLogger(__name__ + ".losses")

__all__ = ["main"]

FEATURES = 32


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )


def _batches(
    rank: int, steps: int, batch: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    teacher = torch.Generator().manual_seed(seed + 999)
    w = torch.randn(FEATURES, 1, generator=teacher) / FEATURES**0.5  # unit-variance x @ w
    data = torch.Generator().manual_seed(seed * 1000 + rank)
    out = []
    for _ in range(steps):
        x = torch.randn(batch, FEATURES, generator=data)
        out.append((x, torch.sin(x @ w)))
    return out


def _client(args: argparse.Namespace, rank: int) -> AllreduceClient:
    if args.config:
        join_info = load_config(args.config.format(rank=rank))
        return AllreduceClient(join_info)
    sock = open_socket(args.host)
    try:
        join_info = join(args.service, args.job, args.token, sock.getsockname()[:2])
    except BaseException:
        sock.close()
        raise
    return AllreduceClient(join_info, sock=sock)


def _log_to_std_streams() -> None:
    """Loss lines bare on stdout; everything else (warnings and up) on stderr."""
    to_stdout = logging.StreamHandler(sys.stdout)
    to_stdout.setFormatter(logging.Formatter("%(message)s"))
    losses.addHandler(to_stdout)
    losses.setLevel(logging.INFO)
    losses.propagate = False
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    """Train; returns the exit status (4 when inasched fails, with one line on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m workers.train_example")
    parser.add_argument("--comm", choices=["inasched", "gloo"], default="inasched")
    parser.add_argument("--hook", choices=["async", "sync"], default="async")
    parser.add_argument("--config", help="join JSON path; '{rank}' is replaced by the rank")
    parser.add_argument("--service")
    parser.add_argument("--job", type=int)
    parser.add_argument("--token")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _log_to_std_streams()
    if args.comm == "inasched" and not (args.config or (args.service and args.token)):
        parser.error("--comm inasched needs --config, or --service, --job and --token")
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    client = None
    try:
        model = DistributedDataParallel(_model(args.seed))
        if args.comm == "inasched":
            client = _client(args, rank)
            register(model, client, overlap=args.hook == "async")
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for step, (x, y) in enumerate(_batches(rank, args.steps, args.batch, args.seed)):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            if rank == 0:
                losses.info(json.dumps({"step": step, "loss": loss.item()}))
    except WorkerError as exc:
        log.error("%s", exc)
        return 4
    finally:
        if client is not None:
            client.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
