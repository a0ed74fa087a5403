"""FSDP2 (``fully_shard``, gloo, 2 CPU processes).

* shard -> optimizer -> ``initialize`` at O1 trains like FSDP2's own MixedPrecisionPolicy;
* ``initialize`` -> shard leaves the optimizer holding the pre-shard tensors: the step is
  refused (it used to train nothing, silently);
* O2 (bf16 and fp16) and O3 on sharded parameters build on FSDP2's MixedPrecisionPolicy
  and train like native FSDP2 mixed precision; an overflow on one rank skips the step on
  both, leaving the shards unchanged; a partly sharded model is refused.
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


def _losses(rank, model, opt, use_amp, steps=3, inject_at=None):
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
                if step == inject_at and rank == 1:   # overflow on this rank only
                    next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
        elif use_amp is None:   # native FSDP2 mixed precision (the policy casts)
            loss = model(x).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
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

        # O2 / O3 on sharded parameters: FSDP2's own policy does the casting
        for half in (torch.bfloat16, torch.float16):
            policy = fsdp.MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
            model = _shard(_model(), mp_policy=policy)
            record[f"native-{half}"] = _losses(
                rank, model, torch.optim.SGD(model.parameters(), lr=0.1), None)
            for level in ("O2", "O3"):
                amp.reset()
                model = _shard(_model())
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                model, opt = amp.initialize(model, opt, opt_level=level, cast_model_type=half,
                                            verbosity=0)
                record[f"{level}-{half}"] = _losses(rank, model, opt, True)
                record[f"{level}-{half}-dtype"] = model(torch.randn(2, 8)).dtype
        # fp16 O2 with an inf on rank 1 only: both ranks skip that step, then train on
        amp.reset()
        model = _shard(_model())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = amp.initialize(model, opt, opt_level="O2", verbosity=0)
        _losses(rank, model, opt, True, steps=1)
        before = [p.to_local().detach().clone() for p in model.parameters()]
        _losses(rank, model, opt, True, steps=1, inject_at=0)
        record["inject-unchanged"] = all(torch.equal(a, p.to_local())
                                         for a, p in zip(before, model.parameters()))
        record["inject-skipped"], record["inject-scale"] = amp.skipped_steps(), amp.loss_scale()
        _losses(rank, model, opt, True, steps=1)
        record["inject-moved"] = not all(torch.equal(a, p.to_local())
                                         for a, p in zip(before, model.parameters()))
        # a partly sharded model (the root not sharded) is refused
        amp.reset()
        model = _model()
        fsdp.fully_shard(model[0])
        try:
            amp.initialize(model, torch.optim.SGD(model.parameters(), lr=0.1), opt_level="O2",
                           verbosity=0)
            record["partly-sharded"] = "accepted"
        except RuntimeError as exc:
            record["partly-sharded"] = str(exc)
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
        for half in (torch.bfloat16, torch.float16):
            native = r[f"native-{half}"]
            for level in ("O2", "O3"):
                got = r[f"{level}-{half}"]
                assert got == pytest.approx(native, rel=2e-2, abs=1e-3), (level, half, got, native)
                assert r[f"{level}-{half}-dtype"] == torch.float32   # outputs in fp32
        assert r["inject-unchanged"] and r["inject-moved"], r
        assert (r["inject-skipped"], r["inject-scale"]) == (1, 32768.0)
        msg = r["partly-sharded"]
        assert "partly sharded" in msg and "fully_shard the root" in msg, msg
