"""FSDP2 (``fully_shard``, gloo, 2 CPU processes).

* shard -> optimizer -> ``initialize`` at O1 trains like FSDP2's own MixedPrecisionPolicy;
* ``initialize`` -> shard leaves the optimizer holding the pre-shard tensors: the step is
  refused (it used to train nothing, silently);
* O2/O3 on sharded parameters are refused at ``initialize`` with what to use instead.
"""
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

fsdp = pytest.importorskip("torch.distributed.fsdp")
pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available() or not hasattr(fsdp, "fully_shard"),
    reason="needs torch.distributed with gloo and FSDP2 (fully_shard)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def _shard(model, **kw):
    for layer in model:
        if isinstance(layer, nn.Linear):
            fsdp.fully_shard(layer, **kw)
    fsdp.fully_shard(model, **kw)
    return model


def _losses(rank, model, opt, use_amp, steps=3):
    from amplint import amp

    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(10 * step + rank)   # different data per rank
        x = torch.randn(6, 8, generator=g)
        if use_amp:
            loss = model(x).float().pow(2).mean()
            opt.zero_grad()
            with amp.scale_loss(loss, opt) as scaled:
                scaled.backward()
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _worker(rank, world, port, out_dir):
    sys.path.insert(0, os.getcwd())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    from amplint import amp

    record = {}
    try:
        # native reference: FSDP2's own mixed precision
        policy = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        model = _shard(_model(), mp_policy=policy)
        record["native"] = _losses(rank, model, torch.optim.SGD(model.parameters(), lr=0.1), False)

        # shard -> optimizer -> initialize at O1 (and with lr=0: what "trains nothing" gives)
        for key, lr in (("O1", 0.1), ("O1-lr0", 0.0)):
            amp.reset()
            model = _shard(_model())
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            model, opt = amp.initialize(model, opt, opt_level="O1", half_dtype=torch.bfloat16,
                                        verbosity=0)
            record[key] = _losses(rank, model, opt, True)

        # initialize -> shard: the optimizer's tensors are no longer the model's
        for level in ("O1", "O2"):
            amp.reset()
            model = _model()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0,
                                        cast_model_type=torch.bfloat16 if level == "O2" else None)
            _shard(model)
            try:
                _losses(rank, model, opt, True, steps=1)
                record[f"late-{level}"] = "trained"
            except RuntimeError as exc:
                record[f"late-{level}"] = str(exc)

        # O2 / O3 on sharded parameters
        for level in ("O2", "O3"):
            amp.reset()
            model = _shard(_model())
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            try:
                amp.initialize(model, opt, opt_level=level, verbosity=0)
                record[f"sharded-{level}"] = "accepted"
            except RuntimeError as exc:
                record[f"sharded-{level}"] = str(exc)
        amp.reset()
    finally:
        torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.destroy_process_group()


def test_fsdp2(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        r = torch.load(tmp_path / f"rank{rank}.pt")
        native, o1 = r["native"], r["O1"]
        assert o1 == pytest.approx(native, rel=2e-2, abs=1e-3), (o1, native)
        assert abs(o1[2] - r["O1-lr0"][2]) > 1e-3     # the steps changed the sharded weights
        for level in ("O1", "O2"):
            msg = r[f"late-{level}"]
            assert "is no longer the tensor this SGD updates" in msg, msg
            assert "fully_shard" in msg and "\n" not in msg
        for level in ("O2", "O3"):
            msg = r[f"sharded-{level}"]
            assert "FSDP2-sharded parameters" in msg and "MixedPrecisionPolicy" in msg, msg
            assert "opt_level='O1'" in msg and "\n" not in msg
