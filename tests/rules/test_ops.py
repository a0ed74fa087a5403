"""AMP401 uncovered-op: the CLI on the ops fixtures, the project index (registrations in
other files), the registration fix, the op families against the installed torch, and the
fixtures run under the bundled engine's O1 before and after the fix."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from amplint.analysis import ops
from amplint.config import Settings
from amplint.context import FileContext
from amplint.engine import parse
from amplint.project import ProjectIndex, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = os.path.join(ROOT, "fixtures", "ops")
EXPECT = re.compile(r"#\s*expect:.*\bAMP401\b")


def findings(amplint, *args, cwd=ROOT):
    proc = amplint("check", *args, "--select", "AMP401", "--format", "json", "--no-cache", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def expected(folder):
    out = set()
    for base, _, names in os.walk(folder):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(base, name)
                with open(path, encoding="utf-8") as fh:
                    for number, line in enumerate(fh, 1):
                        if EXPECT.search(line):
                            out.add((os.path.relpath(path, ROOT), number))
    return out


# --- the CLI on the fixtures ------------------------------------------------------------

def test_ops_fixtures_exact(amplint):
    got = {(f["path"], f["line"]) for f in findings(amplint, "fixtures/ops")}
    assert got == expected(OPS)


def test_policy_switch_on_the_command_line(amplint):
    """The same XLNet-style file: einsum flagged under the amplint policy, not under
    torch.autocast's (which runs einsum in half)."""
    path = "fixtures/ops/transformer_xl.py"
    assert len(findings(amplint, path)) == 4
    assert findings(amplint, path, "--engine", "torch") == []
    # linalg: uncovered by CUDA autocast; CPU autocast lists linalg_inv as fp32 but not slogdet
    gauss = "fixtures/ops/gaussian_head.py"
    assert {f["line"] for f in findings(amplint, gauss, "--engine", "torch")} == {35, 36}
    assert {f["line"] for f in findings(amplint, gauss, "--engine", "torch", "--device", "cpu")} == {36}
    torch_cuda = findings(amplint, gauss, "--engine", "torch")
    assert all(f["fix"]["applicability"] == "display" for f in torch_cuda)
    assert "torch.autocast(\"cuda\", enabled=False)" in torch_cuda[0]["message"]


def test_registrations_in_another_file(amplint):
    """Alone, the model file is flagged; with its package ``__init__`` linted too, not."""
    alone = findings(amplint, "fixtures/ops/registered/bilinear_pooling.py")
    assert [f["line"] for f in alone] == [17, 19]
    assert findings(amplint, "fixtures/ops/registered/bilinear_pooling.py", "fixtures/ops/registered/__init__.py") == []
    # train.py registers einsum on local_attention's module: that reaches its `from torch import einsum`
    assert findings(amplint, "fixtures/ops/registered/local_attention.py") != []
    assert findings(amplint, "fixtures/ops/registered/local_attention.py", "fixtures/ops/registered/train.py") == []
    # ...but a registration on torch does not reach a name imported from torch
    resampler = findings(amplint, "fixtures/ops/registered")
    assert {f["path"] for f in resampler} == {"fixtures/ops/registered/perceiver_resampler.py"}
    assert "sys.modules[__name__]" in resampler[0]["message"]


def _project(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


MODEL = """\
    import torch
    from torch import nn


    class Attn(nn.Module):
        def forward(self, q, k):
            return torch.einsum("bid,bjd->bij", q, k)
"""


def test_registration_reach(tmp_path, amplint):
    """A training script reaches model files below its folder, or those it imports; a
    registration in an unrelated sibling folder does not."""
    reg = "import torch\nfrom amplint import amp\namp.register_half_function(torch, 'einsum')\n"
    _project(tmp_path, {
        "src/mypkg/__init__.py": "",
        "src/mypkg/models/xlnet.py": MODEL,
        "scripts/train.py": "from mypkg.models.xlnet import Attn\n" + reg,
        "tools/other/attn.py": MODEL,
        "tools/bench/bench.py": reg,
    })
    got = {os.path.normpath(f["path"]) for f in findings(amplint, ".", cwd=tmp_path)}
    assert got == {"tools/other/attn.py"}


def test_registration_scope_ignores_the_folder_the_checkout_is_in(tmp_path, amplint):
    """Cloned into a folder named ``amplint``, ``from amplint import amp`` in one fixture
    must not reach every other fixture: names come from import roots, not from whatever
    folders sit above the project (CI may clone the repository anywhere)."""
    checkout = tmp_path / "amplint"
    shutil.copytree(OPS, checkout / "fixtures" / "ops", ignore=shutil.ignore_patterns("__pycache__"))
    got = {(f["path"], f["line"]) for f in findings(amplint, "fixtures/ops", cwd=checkout)}
    assert got == expected(OPS)
    # from above the checkout, its pyproject.toml is the config root (`-I`: the folder
    # named amplint in the current folder must not shadow the installed package)
    (checkout / "pyproject.toml").write_text("[tool.amplint]\n")
    proc = subprocess.run([sys.executable, "-I", "-m", "amplint", "check", "amplint/fixtures/ops", "--select", "AMP401",
                           "--format", "json", "--no-cache"], cwd=tmp_path, capture_output=True, text=True)
    got = {(os.path.relpath(f["path"], "amplint"), f["line"]) for f in json.loads(proc.stdout)}
    assert got == expected(OPS)


def test_module_names_come_from_import_roots(tmp_path):
    from amplint.imports import module_names, registration_reaches

    (tmp_path / "amplint" / "src" / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "amplint" / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "amplint" / "src" / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "amplint" / "tools").mkdir()
    root = str(tmp_path / "amplint")
    model = str(tmp_path / "amplint" / "src" / "pkg" / "sub" / "m.py")
    assert module_names(model, root) == {"pkg.sub.m"}
    assert module_names(str(tmp_path / "amplint" / "tools" / "t.py"), root) == {"tools.t"}
    script = str(tmp_path / "amplint" / "tools" / "train.py")
    assert registration_reaches(script, ["pkg.sub"], model, root)
    assert not registration_reaches(script, ["amplint", "amplint.amp", "sub", "m"], model, root)


def test_fix_is_ordered_idempotent_and_keeps_formatting(tmp_path, amplint):
    """In the file that calls ``amp.initialize`` (where registrations belong)."""
    source = textwrap.dedent("""\
        \"\"\"Doc.\"\"\"
        import opt_einsum as oe
        import torch  # the framework
        from torch import nn
        from amplint import amp
        try:
            import my_fused_ops
        except ImportError:  # optional
            my_fused_ops = None


        class M(nn.Module):
            def forward(self, a, b, c):
                x = oe.contract("ij,jk->ik", a, b)
                y = torch.fft.rfft(c)   # spectral
                z = torch.einsum("ij,jk->ik", a, b) + torch.einsum("ij,jk->ik", b, a)
                return x, y, z, torch.linalg.inv(c)


        model = amp.initialize(M(), opt_level="O1")
    """)
    path = tmp_path / "m.py"
    path.write_text(source)
    proc = amplint("fix", str(path), "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixed = path.read_text()
    registrations = [line for line in fixed.splitlines() if "register_" in line]
    assert registrations == [  # in the order of first use, one per op
        'amp.register_half_function(oe, "contract")',
        'amp.register_float_function(torch.fft, "rfft")',
        'amp.register_half_function(torch, "einsum")',
        'amp.register_float_function(torch.linalg, "inv")',
    ]
    # inserted after the last import (a try-block of imports), with the amp the file already
    # imports, everything else byte-identical
    assert fixed.replace("\n".join(registrations) + "\n", "") == source
    assert fixed.index(registrations[0]) > fixed.index("my_fused_ops = None")
    amplint("fix", str(path), "--no-cache")
    assert path.read_text() == fixed
    # a later op is appended after the existing registrations, not duplicated
    path.write_text(fixed.replace("torch.linalg.inv(c)", "torch.linalg.inv(c) + torch.linalg.det(c)"))
    amplint("fix", str(path), "--no-cache")
    again = path.read_text()
    assert again.count("from amplint import amp") == 1
    assert 'amp.register_float_function(torch.linalg, "inv")\namp.register_float_function(torch.linalg, "det")\n' in again


def test_no_fix_for_names_that_may_be_none(tmp_path, amplint):
    """``oe`` is None when opt_einsum is missing: registering on it would raise at import."""
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent("""\
        import torch
        try:
            import opt_einsum as oe
        except ImportError:
            oe = None


        class M(torch.nn.Module):
            def forward(self, a, b):
                return oe.contract("ij,jk->ik", a, b)
    """))
    (finding,) = findings(amplint, str(path))
    assert finding["fix"] is None


def test_fix_keeps_crlf(tmp_path, amplint):
    path = tmp_path / "m.py"
    script = textwrap.dedent(MODEL) + "\n\nfrom amplint import amp\nmodel = amp.initialize(Attn())\n"
    path.write_bytes(script.replace("\n", "\r\n").encode())
    amplint("fix", str(path), "--no-cache")
    data = path.read_bytes()
    assert b'amp.register_half_function(torch, "einsum")\r\n' in data
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_collect_is_called_on_the_class():
    """``summarize`` gets rule classes (phase 1 runs before any instance exists)."""
    from amplint.rules.amp401_uncovered_op import UncoveredOp

    text = "import torch\nfrom amplint import amp\nimport mypkg.model\namp.register_half_function(torch, 'einsum')\n"
    ctx = FileContext("pkg/__init__.py", text, parse("pkg/__init__.py", text), Settings())
    ctx.walk_and_bucket(set())
    summary = summarize(ctx, [UncoveredOp])
    facts = summary.facts["AMP401"]
    assert facts["registrations"] == [["torch", "einsum", "half"]]
    assert "mypkg.model" in facts["imports"]
    assert json.loads(json.dumps(summary.to_json())) == summary.to_json()
    index = ProjectIndex([summary])
    assert index.facts("AMP401") == [("pkg/__init__.py", facts)]


# --- the op families against the installed torch -----------------------------------------

import torch  # noqa: E402  (a dev dependency: a broken torch must fail, not skip)


def _no_half_calls():
    a = torch.randn(6, 6)
    spd = (a @ a.T + 6 * torch.eye(6)).half()
    b = torch.randn(6, 2).half()
    calls = {
        "inv": (spd,), "det": (spd,), "slogdet": (spd,), "cholesky": (spd,), "eigh": (spd,),
        "eigvalsh": (spd,), "svd": (spd,), "svdvals": (spd,), "qr": (spd,), "solve": (spd, b),
        "pinv": (spd,), "lu_factor": (spd,), "lstsq": (spd, b),
    }
    return [(f"torch.linalg.{name}", getattr(torch.linalg, name), args) for name, args in calls.items()] + [
        ("torch.inverse", torch.inverse, (spd,)), ("torch.logdet", torch.logdet, (spd,)),
        ("torch.cdist", torch.cdist, (spd, spd)), ("torch.fft.rfft", torch.fft.rfft, (torch.randn(100).half(),)),
    ]


@pytest.mark.parametrize("qualname,func,args", _no_half_calls(), ids=[c[0] for c in _no_half_calls()])
def test_fp32_only_ops_really_have_no_half_kernel(qualname, func, args):
    assert ops.family(qualname) in (ops.FP32_ONLY, ops.FFT)
    with pytest.raises((RuntimeError, NotImplementedError)):
        func(*args)


def test_half_capable_linalg_is_not_flagged():
    x = torch.randn(4, 4).half()
    for name in ("diagonal", "matrix_power", "matrix_exp"):
        assert ops.family(f"torch.linalg.{name}") is None
        args = (x, 2) if name == "matrix_power" else (x,)
        assert getattr(torch.linalg, name)(*args).dtype == torch.float16


def test_families_exist_in_torch():
    for qualname in ("torch.einsum", "torch.tensordot", "torch.linalg.inv", "torch.fft.rfft2", "torch.stft"):
        owner, _, attr = qualname.rpartition(".")
        module = torch
        for part in owner.split(".")[1:]:
            module = getattr(module, part)
        assert hasattr(module, attr), qualname
        assert ops.family(qualname) is not None


# --- under the bundled engine's O1, before and after the fix -------------------------------

DRIVER = r'''
import importlib.machinery, importlib.util, json, sys
import torch
from torch.overrides import TorchFunctionMode
from amplint import amp


class Record(TorchFunctionMode):
    """Result dtypes of the named torch functions (seen below the engine's wrappers)."""

    def __init__(self, names):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in self.names:
            first = out[0] if isinstance(out, tuple) else out
            self.seen.append(str(first.dtype).replace("torch.", ""))
        return out


def load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def run(path, name, names, register_torch_einsum=False, submodule=None, setup=None):
    module = load(path, name)
    if register_torch_einsum:  # what a training script would do
        amp.register_half_function(torch, "einsum")
    if setup:  # the lines AMP401's display fix says to add to the training script
        lines = setup.splitlines()
        for imported in [line.split()[1] for line in lines if line.startswith("import ")]:
            lines = [line.replace(imported, "_model_module") for line in lines if not line.startswith("import ")]
        exec("\n".join(lines), {"torch": torch, "sys": sys, "_model_module": module})
    model, inputs = module.example()
    model = amp.initialize(model, opt_level="O1", verbosity=0)
    record = Record(set(names))
    try:
        with record, torch.no_grad():
            if submodule:
                getattr(model, submodule)(torch.arange(inputs[0].shape[0] - 1, -1, -1.0))
            else:
                model(*inputs)
        result = {"ok": True, "error": ""}
    except RuntimeError as exc:
        result = {"ok": False, "error": str(exc).splitlines()[0]}
    finally:
        amp.reset()
    result["dtypes"] = record.seen
    return result


print(json.dumps([run(**step) for step in json.loads(sys.argv[1])]))
'''


RUNS = {
    "einsum": [
        {"path": "fixtures/ops/transformer_xl.py", "name": "txl_before", "names": ["einsum"]},
        {"path": "fixtures/ops/transformer_xl.py", "name": "txl_pos", "names": ["einsum"], "submodule": "pos_emb"},
        {"path": "fixtures/ops/transformer_xl.py", "name": "txl_after", "names": ["einsum"], "setup": "transformer_xl.py"},
    ],
    "from_import": [
        {"path": "fixtures/ops/perceiver_io.py", "name": "pio_before", "names": ["einsum"]},
        {"path": "fixtures/ops/perceiver_io.py", "name": "pio_torchreg", "names": ["einsum"], "register_torch_einsum": True},
        {"path": "fixtures/ops/perceiver_io.py", "name": "pio_after", "names": ["einsum"], "setup": "perceiver_io.py"},
    ],
    "linalg_fft": [
        {"path": "fixtures/ops/gaussian_head.py", "name": "g_before", "names": ["linalg_inv"]},
        {"path": "fixtures/ops/gaussian_head.py", "name": "g_after", "names": ["linalg_inv", "linalg_slogdet"],
         "setup": "gaussian_head.py"},
        {"path": "fixtures/ops/global_filter.py", "name": "f_before", "names": ["fft_rfft2"]},
        {"path": "fixtures/ops/global_filter.py", "name": "f_after", "names": ["fft_rfft2", "fft_irfft2"],
         "setup": "global_filter.py"},
    ],
    "function": [
        {"path": "fixtures/ops/custom_function.py", "name": "cf_before", "names": ["sigmoid"]},
        {"path": "fixtures/ops/custom_function.py.unsafe-fixed", "name": "cf_after", "names": ["sigmoid"]},
    ],
}


def displayed_registrations(amplint) -> dict[str, str]:
    """File name -> the code AMP401's display fix shows for it: the registrations to add
    before ``amp.initialize`` in the training script (``fixtures/ops/train.py``), since a
    model file gains no engine import."""
    shown = {}
    for finding in findings(amplint, os.path.relpath(OPS, ROOT)):
        fix = finding["fix"]
        if (fix and fix["applicability"] == "display" and "register_" in fix["description"]
                and os.path.dirname(finding["path"]) == os.path.relpath(OPS, ROOT)):
            assert "fixtures/ops/train.py:" in fix["description"], fix
            shown[os.path.basename(finding["path"])] = fix["description"].rsplit("`", 2)[1].replace("; ", "\n")
    return shown


@pytest.fixture(scope="module")
def o1(tmp_path_factory, amplint):
    """Every group of runs in its own process (user registrations last for the whole
    process), all processes at once."""
    driver = tmp_path_factory.mktemp("o1") / "driver.py"
    driver.write_text(DRIVER)
    shown = displayed_registrations(amplint)
    runs = {key: [dict(step, setup=shown[step["setup"]]) if "setup" in step else step for step in steps]
            for key, steps in RUNS.items()}
    procs = {key: subprocess.Popen([sys.executable, str(driver), json.dumps(steps)], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for key, steps in runs.items()}
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        out[key] = json.loads(stdout.splitlines()[-1]) if proc.returncode == 0 else stderr
    return out


def results(o1, key):
    assert isinstance(o1[key], list), o1[key]
    return o1[key]


def test_einsum_runs_in_half_only_after_the_fix(o1):
    before, positional, after = results(o1, "einsum")
    # before: fp16 projections meet the fp32 r_w_bias: einsum refuses mixed inputs (apex #895)
    assert not before["ok"] and "expected scalar type" in before["error"], before
    # ...and an einsum of fp32 tensors runs in fp32 (no Tensor Cores)
    assert positional["ok"] and positional["dtypes"] == ["float32"], positional
    # after the registration AMP401 shows for the training script: every einsum runs in half
    assert after["ok"], after
    assert after["dtypes"] == ["float16"] * 4, after


def test_from_import_needs_the_module_registration(o1):
    before, torch_registered, after = results(o1, "from_import")
    assert not before["ok"] and "dtype" in before["error"], before
    # registering torch.einsum does not reach `from torch import einsum` (what AMP401 says)
    assert not torch_registered["ok"] and torch_registered["error"] == before["error"], torch_registered
    assert after["ok"] and after["dtypes"] == ["float16", "float16"], after


def test_linalg_and_fft_run_in_fp32_after_the_fix(o1):
    gauss, gauss_fixed, gfnet, gfnet_fixed = results(o1, "linalg_fft")
    assert not gauss["ok"] and "Low precision dtypes not supported" in gauss["error"], gauss
    assert gauss_fixed["ok"] and gauss_fixed["dtypes"] == ["float32"] * 3, gauss_fixed  # 2 inv + slogdet
    assert not gfnet["ok"] and "Half" in gfnet["error"], gfnet
    assert gfnet_fixed["ok"] and gfnet_fixed["dtypes"] == ["complex64", "float32"], gfnet_fixed


def test_custom_function_forward_in_fp32_after_the_unsafe_fix(o1):
    before, after = results(o1, "function")
    assert before["dtypes"][:1] == ["float16"], before  # the Function's forward saw fp16
    assert after["ok"] and after["dtypes"] == ["float32"], after
