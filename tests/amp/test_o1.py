"""O1 function-level casting: list dtypes (same on CPU as on CUDA), registration, reversibility."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amplint import amp
from amplint.amp import policy
from amplint.amp._casting import resolve


def _init_o1(**kw):
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return amp.initialize(model, opt, opt_level="O1", verbosity=0, **kw)


LOW = [torch.float16, torch.bfloat16]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("low", LOW)
def test_listed_ops_get_the_policy_dtype_on_every_device(low, device):
    _init_o1(half_dtype=low)
    f = torch.randn(4, 4, device=device)
    h = f.to(low)
    cases = {
        "torch.nn.functional.linear": lambda: F.linear(f, f),
        "torch.mm": lambda: torch.mm(f, f),
        "torch.Tensor.__matmul__": lambda: f @ f,
        "torch.nn.functional.scaled_dot_product_attention":
            lambda: F.scaled_dot_product_attention(f[None], f[None], f[None]),
        "torch.nn.functional.softmax": lambda: F.softmax(h, -1),   # CPU autocast keeps fp16 here
        "torch.Tensor.softmax": lambda: h.softmax(-1),
        "torch.Tensor.sum": lambda: h.sum(),                        # and here
        "torch.sum": lambda: torch.sum(h, 0),
        "torch.exp": lambda: torch.exp(h),
        "torch.nn.functional.layer_norm": lambda: F.layer_norm(h, (4,)),
        "torch.nn.functional.mse_loss": lambda: F.mse_loss(h, h),
        "torch.nn.functional.cross_entropy":
            lambda: F.cross_entropy(h, torch.tensor([0, 1, 2, 3], device=device)),
        "torch.dot": lambda: torch.dot(h[0], f[0]),
        "torch.cat": lambda: torch.cat([h, f]),
        "torch.einsum": lambda: torch.einsum("ij,jk->ik", h, h),
        "torch.nn.functional.gelu": lambda: F.gelu(h),
    }
    want = {"half": low, "float": torch.float32, "promote": torch.float32}
    for name, fn in cases.items():
        kind = policy.cast_of(name)
        expected = want[kind] if kind else low  # unlisted: input dtype
        assert fn().dtype == expected, (name, kind)


def test_softmax_with_explicit_dtype_is_respected():
    _init_o1()
    h = torch.randn(3, 3).half()
    assert F.softmax(h, -1, dtype=torch.float16).dtype == torch.float16
    assert h.sum(dtype=torch.float16).dtype == torch.float16


def test_cross_entropy_matches_fp32_reference():
    _init_o1()
    logits = torch.randn(6, 5).half().requires_grad_()
    target = torch.tensor([0, 1, 2, 3, 4, -100])
    for kw in ({}, {"reduction": "sum"}, {"weight": torch.rand(5)}, {"label_smoothing": 0.1}):
        got = F.cross_entropy(logits, target, **kw)
        ref = F.cross_entropy(logits.detach().float(), target, **kw)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, ref)
    got.backward()
    assert logits.grad.dtype == torch.float16


def test_fp64_is_never_cast():
    _init_o1()
    d = torch.randn(3, 3, dtype=torch.float64)
    assert torch.mm(d, d).dtype == torch.float64


def test_banned_and_inplace_guards():
    _init_o1()
    h = torch.rand(4).half()
    with pytest.raises(NotImplementedError, match="binary_cross_entropy_with_logits"):
        F.binary_cross_entropy(h, h)
    with pytest.raises(NotImplementedError, match="out-of-place"):
        h.exp_()
    assert F.binary_cross_entropy(h.float(), h.float()).dtype == torch.float32
    with amp.disable_casts():
        assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.float32
        h.clone().exp_()
    assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.float16


def test_grads_of_weights_are_fp32_and_cast_cache_is_reused_and_invalidated():
    from amplint.amp._casting import CASTS
    model, opt = _init_o1()
    x = torch.randn(2, 4)
    y1 = model(x)
    w_half = CASTS.cache[model.weight][1]
    model(x)
    assert CASTS.cache[model.weight][1] is w_half  # one cast per weight per iteration
    with amp.scale_loss(y1.float().sum(), opt) as s:
        s.backward()
    assert model.weight.grad.dtype == torch.float32
    assert not CASTS.cache                          # cleared at scale_loss exit, as apex
    with torch.no_grad():
        model(x)
        model.weight.add_(1.0)                      # a version bump invalidates the entry
        out = model(x)
    torch.testing.assert_close(out.float(), F.linear(x, model.weight, model.bias).float(),
                               atol=1e-2, rtol=1e-2)


def test_register_before_and_after_initialize_and_decorators():
    a = torch.randn(3, 3)
    amp.register_float_function(torch, "sigmoid")      # before initialize: applied by it
    _init_o1()
    assert torch.sigmoid(a.half()).dtype == torch.float32
    assert torch.einsum("ij,jk->ik", a, a).dtype == torch.float32
    amp.register_half_function(torch, "einsum")         # after initialize: takes effect now
    assert torch.einsum("ij,jk->ik", a, a).dtype == torch.float16

    @amp.float_function
    def f(x):
        return x * 2

    @amp.half_function
    def g(x):
        return x * 2

    assert f(a.half()).dtype == torch.float32 and g(a).dtype == torch.float16
    amp.reset()
    assert f(a.half()).dtype == torch.float16 and g(a).dtype == torch.float32  # inactive: no-op
    with pytest.raises(ValueError, match="No function named"):
        amp.register_half_function(torch, "no_such_function")
    from amplint.amp._casting import CASTS
    CASTS.registry.clear()


def test_reset_restores_every_patched_attribute():
    names = (policy.O1_HALF + policy.O1_FLOAT + policy.O1_PROMOTE + policy.O1_BANNED
             + policy.O1_INPLACE_GUARDED)
    before = {}
    for n in names:
        owner, attr = resolve(n)
        before[n] = (getattr(owner, attr), attr in vars(owner))
    _init_o1()
    assert getattr(torch.nn.functional.softmax, "_amplint_kind", None) == "float"
    assert getattr(torch.Tensor.__matmul__, "_amplint_kind", None) == "half"
    amp.reset()
    for n in names:
        owner, attr = resolve(n)
        assert (getattr(owner, attr), attr in vars(owner)) == before[n], n
    # a second initialize in the same process patches again, once
    _init_o1()
    assert torch.nn.functional.softmax.__wrapped__ is before["torch.nn.functional.softmax"][0]


def test_optimizer_step_runs_without_casts():
    seen = []

    class Spy(torch.optim.SGD):
        def step(self, closure=None):
            seen.append(torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype)
            return super().step(closure)

    model = nn.Linear(4, 4)
    model, opt = amp.initialize(model, Spy(model.parameters(), lr=0.1), opt_level="O1", verbosity=0)
    with amp.scale_loss(model(torch.randn(2, 4)).float().mean() / 8, opt) as s:
        s.backward()
    opt.step()
    assert seen == [torch.float32]
    assert torch.mm(torch.randn(2, 2), torch.randn(2, 2)).dtype == torch.float16


@pytest.mark.parametrize("fp32_log_probs", [True, "lse", False])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_log_probs_option_matches_fp32_reference(fp32_log_probs, reduction):
    """bf16 logits: fp32 log-probabilities (default, an fp32 copy of the logits), an fp32
    log-sum-exp over bf16 exponentials ("lse", no copy) or half log-probabilities (False) give the fp32 loss and gradient within their rounding; the loss is fp32
    every way and ignore_index is honoured."""
    _init_o1(half_dtype=torch.bfloat16, fp32_log_probs=fp32_log_probs)
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(64, 50, generator=g)).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 50, (64,), generator=g)
    target[::7] = -100
    loss = F.cross_entropy(logits, target, reduction=reduction)
    assert loss.dtype == torch.float32
    loss.sum().backward()
    ref_logits = logits.detach().float().requires_grad_()
    ref = torch.nn.functional.cross_entropy.__wrapped__(ref_logits, target, reduction=reduction)
    ref.sum().backward()
    # default: fp32 throughout; lse: each exponential rounds to bf16 (2**-9) before the fp32
    # sum, so the log-sum-exp is off by at most ~2**-9; False: log-probabilities round to 2**-8
    tol = {True: 1e-5, "lse": 3e-3, False: 2e-2}[fp32_log_probs]
    assert torch.allclose(loss.detach(), ref.detach(), rtol=tol, atol=tol)
    assert torch.allclose(logits.grad.float(), ref_logits.grad, rtol=2e-2, atol=2e-2 * ref_logits.grad.abs().max())


def test_fp32_log_probs_is_only_for_o1():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="only applies under O1"):
        amp.initialize(model, opt, opt_level="O2", verbosity=0, fp32_log_probs=False)
