"""Our own tests for every behaviour apex's ``tests/L0/run_amp`` checks (written from the
behaviours, not from apex's code). README "apex's test suite, file by file" maps each apex
file to the tests here. RNNs: ``test_rnn.py``."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amplint import amp

H, S = torch.float16, torch.float32


def _o1(**kw):
    amp.initialize(nn.Module(), opt_level="O1", verbosity=0, **kw)


# -- basic casts: one op per class, fp32 and fp16 inputs, and the gradient's dtype ----------

def _out_and_grad_dtypes(fn, dtype, shape=(4, 8)):
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    y = fn(x)
    y.float().sum().backward()
    return y.dtype, x.grad.dtype


@pytest.mark.parametrize("name,make,expect", [
    ("linear", lambda: nn.Linear(8, 8), H),
    ("conv2d", lambda: nn.Conv2d(4, 4, 1), H),
    ("softmax", lambda: (lambda x: F.softmax(x, dim=-1)), S),
    ("group_norm", lambda: nn.GroupNorm(2, 4), S),
    ("mse_loss", lambda: (lambda x: F.mse_loss(x, torch.zeros_like(x))), S),
    ("relu", lambda: nn.ReLU(), "input"),
    ("batch_norm", lambda: nn.BatchNorm2d(4), "input"),
    ("matmul method", lambda: (lambda x: x.matmul(torch.randn(x.shape[-1], 3))), H),
    ("@ operator", lambda: (lambda x: torch.randn(3, x.shape[0]) @ x), H),
    ("pow method", lambda: (lambda x: x.pow(2)), S),
    ("** operator", lambda: (lambda x: x ** 2), S),
    ("sum", lambda: (lambda x: x.sum(dim=-1)), S),
])
def test_basic_casts_per_op_class(name, make, expect):
    _o1()
    fn = make()
    shape = (2, 4, 3, 3) if name in ("conv2d", "group_norm", "batch_norm") else (4, 8)
    for dtype in (S, H):
        out, grad = _out_and_grad_dtypes(fn, dtype, shape)
        assert out == (dtype if expect == "input" else expect), (name, dtype)
        assert grad == dtype, (name, dtype)           # the gradient has the input's dtype


def test_banned_function_raises_and_allow_banned_runs_it_in_fp32():
    _o1()
    p = torch.rand(4, dtype=H)
    with pytest.raises(NotImplementedError, match="binary_cross_entropy_with_logits"):
        F.binary_cross_entropy(p, p)
    amp.reset()
    _o1(allow_banned=True)
    assert F.binary_cross_entropy(p, p).dtype == S
    assert nn.BCELoss()(p, p).dtype == S


# -- the O1 weight-cast cache -----------------------------------------------------------------

class _Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, x):
        if self.kind == "half":        # a half-listed op: the weight goes through the cache
            return F.linear(x, self.weight)
        if self.kind == "float":       # an fp32-listed op
            return F.layer_norm(x @ self.weight.t().float(), (8,))
        return x * self.weight.sum()   # promotion (fp32 wins)


@pytest.mark.parametrize("kind", ["half", "float", "promote"])
def test_weight_cast_cache_across_train_eval_and_parameter_updates(kind):
    torch.manual_seed(0)
    model = _Net(kind)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    model, opt = amp.initialize(model, opt, opt_level="O1", loss_scale=4.0, verbosity=0)
    x = torch.randn(3, 8)
    for mode in ("train", "eval", "train"):
        model.train(mode == "train")
        for _ in range(2):   # two forwards per block: the second one is a cache hit
            loss = model(x).float().sum() + model(x).float().sum()
            opt.zero_grad()
            with amp.scale_loss(loss, opt) as scaled:
                scaled.backward()
            grad = model.weight.grad.clone()
            opt.step()        # the update bumps the weight's version: the next cast is fresh
            with amp.disable_casts():
                r = ref(x.to(H).float() if kind == "half" else x)
                ref_loss = 2 * r.sum()
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()
            assert torch.allclose(grad, ref.weight.grad, rtol=2e-2, atol=2e-2), (mode, kind)
    # inside one block a weight updated in place is cast again, not served stale
    with torch.no_grad():
        y0 = F.linear(x, model.weight)
        model.weight.add_(1.0)
        y1 = F.linear(x, model.weight)
    assert not torch.equal(y0, y1)


@pytest.mark.parametrize("make", [lambda: nn.Linear(8, 8), lambda: nn.LayerNorm(8)],
                         ids=["half-listed", "float-listed"])
def test_o1_module_with_half_weights_through_allow_incoming_model_not_fp32(make):
    torch.manual_seed(0)
    module = make().half()
    ref = copy.deepcopy(module).float()
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    module, opt = amp.initialize(module, opt, opt_level="O1", loss_scale=4.0, verbosity=0,
                                 allow_incoming_model_not_fp32=True)
    x = torch.randn(3, 8)
    for mode in (True, False, True):             # train, eval, train
        module.train(mode)
        opt.zero_grad()
        out = module(x)
        with amp.scale_loss(out.float().sum(), opt) as scaled:
            scaled.backward()
        assert all(p.grad.dtype == H for p in module.parameters())
    ref(x).sum().backward()
    for p, r in zip(module.parameters(), ref.parameters()):
        assert torch.allclose(p.grad.float(), r.grad, rtol=2e-2, atol=2e-2)


def test_eval_under_no_grad_then_train_reuses_no_gradless_cast():
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1", loss_scale=128.0, verbosity=0)
    x = torch.randn(2, 8)
    with torch.no_grad():
        model(x)                   # caches a cast made without grad
    out = model(x)                 # must not reuse it, or the weight gets no gradient
    with amp.scale_loss(out.float().sum(), opt) as scaled:
        scaled.backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0


# -- promotion and in-place ops on half ----------------------------------------------------------

@pytest.mark.parametrize("op", [torch.mul, torch.atan2, torch.add, lambda a, b: torch.cat([a, b])])
def test_mixed_binary_ops_run_in_the_widest_type(op):
    _o1()
    h, f = torch.randn(4, dtype=H), torch.randn(4)
    assert op(h, f).dtype == S and op(f, h).dtype == S
    assert op(h, h).dtype == H and op(f, f).dtype == S


def test_in_place_ops_on_half():
    _o1()
    h, f = torch.randn(4, dtype=H), torch.randn(4)
    assert h.clone().add_(f).dtype == H          # in-place keeps the written tensor's dtype
    assert f.clone().add_(h).dtype == S
    with pytest.raises(NotImplementedError, match="out-of-place"):
        h.clone().exp_()                         # exp is fp32 under O1: cannot be in place
    assert f.clone().exp_().dtype == S


# -- several losses: overflow, checkpoint, restore --------------------------------------------

def _tiny(seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8, bias=bias), nn.ReLU(), nn.Linear(8, 2, bias=bias))


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_three_losses_overflow_and_checkpoint_restore(level):
    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = amp.initialize(model, opt, opt_level=level, num_losses=3, verbosity=0)
    x = torch.randn(5, 4)
    for step in range(3):
        opt.zero_grad()
        for loss_id in range(3):
            loss = model(x * (2.0 ** 17 if loss_id < step else 1.0)).float().mean()
            with amp.scale_loss(loss, opt, loss_id=loss_id) as scaled:
                scaled.backward()   # loss ids below `step` overflow in this step
        opt.step()
    scales = [amp.loss_scale(i) for i in range(3)]
    assert scales == [2.0 ** 14, 2.0 ** 15, 2.0 ** 16]      # 2, 1 and 0 overflows
    checkpoint = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(),
                                "amp": amp.state_dict()})
    assert all(v.dtype == S for v in checkpoint["model"].values())

    # restore into a fresh model in a fresh session (apex's recipe); both continue alike
    after = []
    for restore in (False, True):
        if restore:
            amp.reset()
            model = _tiny(seed=5)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            model, opt = amp.initialize(model, opt, opt_level=level, num_losses=3, verbosity=0)
            model.load_state_dict(checkpoint["model"])
            opt.load_state_dict(checkpoint["opt"])
            amp.load_state_dict(checkpoint["amp"])
            assert [amp.loss_scale(i) for i in range(3)] == scales
        opt.zero_grad()
        for loss_id in range(3):
            with amp.scale_loss(model(x).float().mean(), opt, loss_id=loss_id) as scaled:
                scaled.backward()
        opt.step()
        after.append([p.detach().float().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*after))


# -- several models, optimizers and losses; inf injected into either backward ------------------

def _reference_step(models, params_of, lrs, skip):
    for opt_id, (params, lr) in enumerate(zip(params_of, lrs)):
        if opt_id in skip:
            continue
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
@pytest.mark.parametrize("inject", [None, 0, 1])
def test_two_models_two_optimizers_two_losses_with_overflow(level, inject):
    torch.manual_seed(0)
    m0, m1 = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
    refs = [copy.deepcopy(m0), copy.deepcopy(m1)]
    o0 = torch.optim.SGD(m0.parameters(), lr=0.25)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.5)
    [m0, m1], [o0, o1] = amp.initialize([m0, m1], [o0, o1], opt_level=level, num_losses=2,
                                        verbosity=0, loss_scale=None if level in ("O1", "O2") else 1.0)
    x = torch.ones(2, 4) * 0.5
    dynamic = level in ("O1", "O2")
    for step in range(2):
        for o in (o0, o1):
            o.zero_grad()
        for loss_id, (m, o) in enumerate(((m0, o0), (m1, o1))):
            with amp.scale_loss(m(x).float().mean(), o, loss_id=loss_id) as scaled:
                scaled.backward()
                if step == 1 and loss_id == inject and dynamic:
                    m.weight.grad.view(-1)[0] = float("inf")
        o0.step()
        o1.step()
        for r in refs:
            r.zero_grad()
            r(x).mean().backward()
        skip = {inject} if (step == 1 and inject is not None and dynamic) else set()
        _reference_step(refs, [list(r.parameters()) for r in refs], [0.25, 0.5], skip)
        for m, r in zip((m0, m1), refs):
            tol = 1e-2 if level != "O0" else 0
            assert torch.allclose(m.weight.float(), r.weight, atol=tol, rtol=tol), (level, step)
    if dynamic:
        assert amp.skipped_steps(0) == (inject == 0) and amp.skipped_steps(1) == (inject == 1)


def test_one_optimizer_over_two_models_and_two_losses_skips_once_for_either_overflow():
    m0, m1 = _tiny(0), _tiny(1)
    opt = torch.optim.SGD(list(m0.parameters()) + list(m1.parameters()), lr=0.1)
    [m0, m1], opt = amp.initialize([m0, m1], opt, opt_level="O2", num_losses=2, verbosity=0)
    x = torch.randn(3, 4)
    before = [p.detach().clone() for p in list(m0.parameters()) + list(m1.parameters())]
    opt.zero_grad()
    with amp.scale_loss(m0(x).float().mean(), opt, loss_id=0) as scaled:
        scaled.backward()
    with amp.scale_loss(m1(x).float().mean(), opt, loss_id=1) as scaled:
        scaled.backward()
        m1[0].weight.grad.view(-1)[0] = float("nan")
    opt.step()
    after = list(m0.parameters()) + list(m1.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after))   # skipped for both models
    assert (amp.skipped_steps(0), amp.skipped_steps(1)) == (0, 1)


@pytest.mark.parametrize("cast_model_type", [None, False])
def test_one_optimizer_two_losses_keeps_the_first_models_master_gradients(cast_model_type):
    """O2, one optimizer over two models, one loss each: the second scale_loss drops the half
    gradient views before its backward, which does not reach the first model; the first
    model's master gradients must still be stepped (apex's run_amp test_multiple_models, with
    half parameters coming in: cast_model_type=False)."""
    m0, m1 = _tiny(0), _tiny(1)
    ref = [copy.deepcopy(m0), copy.deepcopy(m1)]
    if cast_model_type is False:
        m0.half(), m1.half()
    opt = torch.optim.SGD([{"params": m0.parameters(), "lr": 0.25},
                           {"params": m1.parameters(), "lr": 0.5}])
    ref_opt = torch.optim.SGD([{"params": ref[0].parameters(), "lr": 0.25},
                               {"params": ref[1].parameters(), "lr": 0.5}])
    [m0, m1], opt = amp.initialize([m0, m1], opt, opt_level="O2", num_losses=2, verbosity=0,
                                   cast_model_type=cast_model_type, loss_scale=8.0,
                                   allow_incoming_model_not_fp32=cast_model_type is False)
    x = torch.randn(3, 4)
    for model, r, loss_id in ((m0, ref[0], 0), (m1, ref[1], 1)):
        inp = x.half() if cast_model_type is False else x   # O2 casts inputs only when it casts
        with amp.scale_loss(model(inp).float().mean(), opt, loss_id=loss_id) as scaled:
            scaled.backward()
        r(x).mean().backward()
    opt.step()
    ref_opt.step()
    for model, r in zip((m0, m1), ref):
        for p, q in zip(model.parameters(), r.parameters()):
            assert torch.allclose(p.float(), q, atol=2e-2), (cast_model_type, p, q)
    masters = list(amp.master_params(opt))
    assert all(m.dtype == S for m in masters) and len(masters) == 8


# -- add_param_group after initialize ------------------------------------------------------------

@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
def test_add_param_group_after_initialize_trains_the_new_group(level):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 1, bias=False))
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0,
                                loss_scale=None if level in ("O1", "O2") else 1.0)
    opt.add_param_group({"params": model[1].parameters(), "lr": 0.05})
    ref_opt = torch.optim.SGD([{"params": ref[0].parameters()},
                               {"params": ref[1].parameters(), "lr": 0.05}], lr=0.1)
    x = torch.randn(3, 4)
    for _ in range(2):
        opt.zero_grad()
        with amp.scale_loss(model(x).float().mean(), opt) as scaled:
            scaled.backward()
        opt.step()
        ref_opt.zero_grad()
        ref(x).mean().backward()
        ref_opt.step()
    tol = 0 if level == "O0" else 2e-2
    for p, r in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.float(), r, atol=tol, rtol=tol), level
    if level == "O2":
        assert all(p.dtype == S for p in amp.master_params(opt))


# -- optimizer wrappers (LARC, lookahead) ----------------------------------------------------------

class TrustRatioWrapper:
    """A LARC-like wrapper: scales each gradient by a layer-wise trust ratio, then steps the
    optimizer it holds. Not a torch.optim.Optimizer (as apex's LARC was not)."""

    def __init__(self, optim, trust=0.02):
        self.optim = optim
        self.trust = trust
        self.seen = []

    @property
    def param_groups(self):
        return self.optim.param_groups

    @property
    def state(self):
        return self.optim.state

    def zero_grad(self, set_to_none=True):
        self.optim.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, sd):
        self.optim.load_state_dict(sd)

    def step(self, closure=None):
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    self.seen.append((p.dtype, p.grad.dtype))
                    ratio = self.trust * p.norm() / (p.grad.norm() + 1e-12)
                    p.grad.mul_(torch.clamp(ratio, max=1.0))
        return self.optim.step()


class LookaheadWrapper:
    """A lookahead-style wrapper: every k steps pull the fast weights toward slow copies."""

    def __init__(self, optimizer, k=2, alpha=0.5):
        self.optimizer, self.k, self.alpha, self.count = optimizer, k, alpha, 0
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.slow = None

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def step(self, closure=None):
        if self.slow is None:
            self.slow = [p.detach().clone() for g in self.param_groups for p in g["params"]]
        self.optimizer.step()
        self.count += 1
        if self.count % self.k == 0:
            with torch.no_grad():
                fast = [p for g in self.param_groups for p in g["params"]]
                for s, p in zip(self.slow, fast):
                    s.add_(p - s, alpha=self.alpha)
                    p.copy_(s)


@pytest.mark.parametrize("wrap", [TrustRatioWrapper, LookaheadWrapper], ids=["larc", "lookahead"])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_optimizer_wrappers_keep_the_master_weight_guarantees(wrap, level):
    model = _tiny()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = wrap(base)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0)
    assert isinstance(opt, wrap)
    x = torch.randn(6, 4)
    losses = []
    for step in range(4):
        opt.zero_grad()
        before = [p.detach().clone() for p in model.parameters()]
        with amp.scale_loss(model(x).float().pow(2).mean(), opt) as scaled:
            scaled.backward()
            if step == 1:
                model[0].weight.grad.view(-1)[0] = float("inf")
        opt.step()
        if step == 1:   # the overflow skipped the wrapper's step entirely
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        losses.append(model(x).float().pow(2).mean().item())
    assert amp.skipped_steps() == 1 and losses[-1] < losses[0]
    if level == "O2":
        masters = list(amp.master_params(opt))
        assert all(p.dtype == S for p in masters)
        # the model holds the masters' values, and the optimizer checkpoint carries them
        halves = [p for p in model.parameters() if p.dtype == H]
        assert halves and all(torch.equal(h, m.to(H)) for h, m in zip(halves, masters))
        assert "amplint_master_params" in opt.state_dict()
        if wrap is TrustRatioWrapper:
            assert set(opt.seen) == {(S, S)}   # LARC saw fp32 weights and fp32 gradients


# -- deliberate differences from apex, with the alternative --------------------------------------

def test_cpu_keeps_half_as_torch_autocast_does():
    _o1()
    assert torch.randn(2, dtype=H).cpu().dtype == H   # apex: fp32; write .float().cpu()


def test_second_initialize_retires_the_first_sessions_optimizer_and_lists_work_instead():
    a, b = _tiny(0), _tiny(1)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    a, oa = amp.initialize(a, oa, opt_level="O1", verbosity=0)
    b2, ob2 = amp.initialize(b, ob, opt_level="O1", verbosity=0)
    with pytest.raises(RuntimeError, match="earlier amp.initialize"):
        with amp.scale_loss(a(torch.randn(1, 4)).float().sum(), oa):
            pass
    amp.reset()
    # the supported form: one initialize with both models and both optimizers
    a, b = _tiny(0), _tiny(1)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    [a, b], [oa, ob] = amp.initialize([a, b], [oa, ob], opt_level="O1", num_losses=2,
                                      verbosity=0)
    for loss_id, (m, o) in enumerate(((a, oa), (b, ob))):
        o.zero_grad()
        with amp.scale_loss(m(torch.randn(1, 4)).float().sum(), o, loss_id=loss_id) as s:
            s.backward()
        o.step()
