"""DistributedDataParallel (gloo, 2 CPU processes) wrapped after initialize: an overflow on one
rank only makes every rank skip the step and back off the scale, so the ranks never diverge."""
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, levels, out_dir):
    sys.path.insert(0, os.getcwd())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        for level in levels:
            _train(rank, level, out_dir)
    finally:
        dist.destroy_process_group()


def _train(rank, level, out_dir):
    from amplint import amp

    amp.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0)
    ddp = nn.parallel.DistributedDataParallel(model)
    record = {}
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)   # different data per rank
        x = torch.randn(5, 4, generator=g)
        loss = ddp(x).float().pow(2).mean()
        opt.zero_grad()
        before = [p.detach().clone() for p in model.parameters()]
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
            if step == 1 and rank == 1:           # overflow on this rank only
                next(model.parameters()).grad.view(-1)[0] = float("inf")
        opt.step()
        if step == 1:
            record["skipped_unchanged"] = all(torch.equal(a, b) for a, b in
                                              zip(before, model.parameters()))
    record["scale"] = amp.loss_scale()
    record["skipped"] = amp.skipped_steps()
    record["params"] = [p.detach().float().clone() for p in model.parameters()]
    torch.save(record, os.path.join(out_dir, f"{level}-rank{rank}.pt"))


def test_overflow_on_one_rank_skips_on_every_rank(tmp_path):
    levels = ["O1", "O2"]   # one spawn for both levels: process start-up dominates the run time
    mp.spawn(_worker, args=(2, _free_port(), levels, str(tmp_path)), nprocs=2, join=True)
    for level in levels:
        r0, r1 = (torch.load(tmp_path / f"{level}-rank{r}.pt") for r in (0, 1))
        for r in (r0, r1):
            assert r["scale"] == 32768.0 and r["skipped"] == 1 and r["skipped_unchanged"], level
        assert all(torch.equal(a, b) for a, b in zip(r0["params"], r1["params"])), level
