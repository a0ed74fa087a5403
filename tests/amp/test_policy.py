"""The op-policy tables: torch-free import, lookups, and agreement with the installed torch."""
import subprocess
import sys

import pytest
import torch

from amplint.amp import policy
from amplint.amp._casting import resolve


def test_policy_import_does_not_import_torch():
    code = ("import amplint.amp.policy, amplint.amp, sys; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cast_of_amplint_is_device_independent():
    for device in ("cuda", "cpu"):
        assert policy.cast_of("torch.nn.functional.softmax", device=device) == "float"
        assert policy.cast_of("torch.Tensor.sum", device=device) == "float"
        assert policy.cast_of("torch.nn.functional.linear", device=device) == "half"
    assert policy.cast_of("F.softmax") == "float"
    assert policy.cast_of("torch.nn.Softmax") == "float"          # module class -> its function
    assert policy.cast_of("torch.einsum") is None                 # unlisted, as in apex
    assert policy.cast_of("torch.nn.functional.gelu") is None
    assert policy.cast_of("torch.nn.functional.binary_cross_entropy") == "banned"
    assert policy.cast_of("torch.cat") == "promote"
    assert policy.cast_of("torch.dot") == "promote"
    assert policy.cast_of("torch.nn.functional.scaled_dot_product_attention") == "half"


def test_cast_of_torch_differs_between_cpu_and_cuda():
    assert policy.cast_of("torch.nn.functional.softmax", "torch", "cuda") == "float"
    assert policy.cast_of("torch.nn.functional.softmax", "torch", "cpu") is None
    assert policy.cast_of("torch.Tensor.sum", "torch", "cuda") == "float"
    assert policy.cast_of("torch.Tensor.sum", "torch", "cpu") is None
    assert policy.cast_of("torch.einsum", "torch", "cuda") == "half"
    assert policy.cast_of("torch.mm", "torch", "cpu") == "half"
    assert policy.cast_of("torch.Tensor.__matmul__", "torch", "cuda") == "half"
    assert policy.cast_of("torch.nn.functional.binary_cross_entropy", "torch", "cuda") == "banned"
    assert policy.cast_of("torch.nn.functional.binary_cross_entropy", "torch", "cpu") == "float"
    assert policy.cast_of("torch.nn.functional.cross_entropy", "torch", "cuda") == "float"
    assert policy.cast_of("torch.linalg.vecdot", "torch", "cuda") == "half"
    assert policy.cast_of("torch.Tensor.exp_", "torch", "cuda") is None  # in-place: never autocast
    with pytest.raises(ValueError):
        policy.cast_of("torch.mm", "torch", "tpu")


def test_lists_are_disjoint():
    groups = [set(policy.O1_HALF), set(policy.O1_FLOAT), set(policy.O1_PROMOTE),
              set(policy.O1_NATIVE_PROMOTE), set(policy.O1_BANNED)]
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            assert not a & b, a & b


def test_every_amplint_name_exists_in_installed_torch():
    missing = []
    for name in (policy.O1_HALF + policy.O1_FLOAT + policy.O1_PROMOTE + policy.O1_NATIVE_PROMOTE
                 + policy.O1_BANNED + policy.O1_INPLACE_GUARDED):
        try:
            owner, attr = resolve(name)
            getattr(owner, attr)
        except (ImportError, AttributeError):
            missing.append(name)
    assert missing == []


# ATen ops in the reference lists that this torch build does not register (documented).
_ATEN_MAY_BE_MISSING = {"cudnn_convolution", "cudnn_convolution_transpose",
                        "_scaled_dot_product_flash_attention", "mkldnn_rnn_layer"}


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_every_torch_policy_name_is_an_aten_op(device):
    missing = [n for ops in policy.TORCH_AUTOCAST[device].values() for n in ops
               if not hasattr(torch.ops.aten, n) and n not in _ATEN_MAY_BE_MISSING]
    assert missing == []


def test_torch_cpu_policy_matches_cpu_autocast_on_samples():
    """Spot-check the CPU table against real CPU autocast (CI has no GPU for the CUDA one)."""
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        observed = {
            "torch.mm": torch.mm(x, x).dtype,
            "torch.nn.functional.softmax": torch.nn.functional.softmax(x.bfloat16(), -1).dtype,
            "torch.Tensor.sum": x.bfloat16().sum().dtype,
        }
    expected_dtype = {"half": torch.bfloat16, "float": torch.float32, None: torch.bfloat16}
    for name, dtype in observed.items():
        assert expected_dtype[policy.cast_of(name, "torch", "cpu")] == dtype, name
