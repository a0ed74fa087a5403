"""Value flow that follows real code (issue 12, section 1), through the real CLI:
call sites, keyword dicts, config attributes, branch-stored constructor parameters,
cross-file constants and helper summaries, library helpers, fused-import fallbacks,
epsilons by role and library functions' implicit epsilons."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLOW = os.path.join(ROOT, "fixtures", "flow")


def check(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "amplint", "check", *args, "--format", "json", "--no-cache"],
                          cwd=cwd, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))
    return path


def test_checkpoint_bound_vocabulary_is_info_with_the_way_to_pad_anyway():
    (f,) = check(os.path.join(FLOW, "branches"), "--select", "AMP201")
    assert f["line"] == 31 and f["severity"] == "info" and f["fix"] is None
    assert "50257" in f["message"] and "pad_to_multiple_of=64" in f["message"]
    assert "ignore the extra logits" in f["message"] and "25.7 ms" in f["message"]


def test_call_site_values_reach_the_callee(tmp_path):
    found = {(f["line"], f["message"].split(" is ")[1].split(",")[0]) for f in
             check(os.path.join(FLOW, "callsites"), "--select", "AMP201")}
    assert found == {(15, "50257"), (21, "65"), (27, "40990")}


def test_call_sites_that_disagree_give_every_value(tmp_path):
    # a size is the set of values it takes over the call sites (#23): 50257 is one of them;
    # which definition to pad is the author's call, so no edit is offered
    write(tmp_path, "m.py", """
        import torch.nn as nn
        class Head(nn.Module):
            def __init__(self, vocab):
                super().__init__()
                self.out = nn.Linear(512, vocab)
        def small():
            return Head(50257)
        def large():
            return Head(50304)
        """)
    found = check(str(tmp_path), "--select", "AMP201")
    assert [(f["line"], f["fix"]) for f in found] == [(6, None)]
    assert "50257" in found[0]["message"] and "several values" in found[0]["message"]


def test_cross_file_constants_and_helpers_need_the_other_files(tmp_path):
    both = {(f["line"], f["code"]) for f in check(os.path.join(FLOW, "crossfile"))}
    assert both == {(14, "AMP101"), (15, "AMP101"), (16, "AMP101"), (17, "AMP101"), (19, "AMP102")}
    shutil.copy(os.path.join(FLOW, "crossfile", "model.py"), tmp_path / "model.py")
    alone = {(f["line"], f["code"]) for f in check(str(tmp_path))}
    assert alone == {(17, "AMP101")}  # only the library table's entry remains


def test_library_helper_fills_only_on_the_branch_that_fills(tmp_path):
    write(tmp_path, "m.py", """
        import torch
        from allennlp.nn.util import masked_softmax
        class A(torch.nn.Module):
            def forward(self, s, m):
                a = masked_softmax(s, m)
                b = masked_softmax(s, m, memory_efficient=True, mask_fill_value=-1e4)
                c = masked_softmax(s, m, memory_efficient=True, mask_fill_value=-1e9)
                return a, b, c
        """)
    found = check(str(tmp_path), "--select", "AMP101")
    assert [(f["line"], f["code"]) for f in found] == [(8, "AMP101")]


def test_fused_import_fallback_is_analysed():
    found = {(f["line"], f["code"]) for f in check(os.path.join(FLOW, "fused_fallback.py"), "--select", "AMP102")}
    assert found == {(26, "AMP102")}


def test_fallback_norm_of_another_file(tmp_path):
    write(tmp_path, "modeling.py", """
        import torch
        import torch.nn as nn
        try:
            from apex.normalization import FusedLayerNorm as BertLayerNorm
        except ImportError:
            class BertLayerNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-4):
                    super().__init__()
                    self.variance_epsilon = eps
                def forward(self, x):
                    s = (x - x.mean(-1, keepdim=True)).abs().mean(-1, keepdim=True)
                    return x / torch.sqrt(s + self.variance_epsilon)
        """)
    write(tmp_path, "modeling_gpt2.py", """
        import torch.nn as nn
        from .modeling import BertLayerNorm as LayerNorm
        class GPT2Config(object):
            def __init__(self, n_embd=768, layer_norm_epsilon=1e-5):
                self.n_embd = n_embd
                self.layer_norm_epsilon = layer_norm_epsilon
        class Block(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.ln_1 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        """)
    found = [f for f in check(str(tmp_path), "--select", "AMP102") if f["path"].endswith("modeling_gpt2.py")]
    assert [(f["line"], f["severity"]) for f in found] == [(11, "warning")]
    assert "subnormal" in found[0]["message"] and "modeling.py" in found[0]["message"]


def test_implicit_library_eps_only_when_not_upcast():
    path = os.path.join(FLOW, "o2", "normalize_eps.py")
    assert {f["line"] for f in check(path, "--select", "AMP102")} == {9, 18, 19, 20}
    # O1 runs F.normalize and F.cosine_similarity in fp32; F.pairwise_distance is on no list
    assert {f["line"] for f in check(path, "--select", "AMP102", "--opt-level", "O1")} == {20}


def test_library_eps_helpers_of_vision_libraries(amplint):
    """kornia 0.6.12, segment-anything 1.0 and timm 0.4.5 helpers that add the eps they
    are given in the input's dtype: a tiny eps passed to them is flagged, and the
    message cites the library file it was read from."""
    proc = amplint("check", "fixtures/flow/library/vision.py", "--format", "json", "--no-cache", "--select", "AMP102")
    found = {(f["line"], f["code"]): f["message"] for f in json.loads(proc.stdout)}
    assert sorted(found) == [(15, "AMP102"), (17, "AMP102"), (20, "AMP102"), (21, "AMP102")]
    assert "(kornia==0.6.12 kornia/color/hsv.py:41)" in found[(20, "AMP102")]
    assert "(segment-anything==1.0 segment_anything/modeling/common.py:41)" in found[(15, "AMP102")]


def test_every_library_entry_cites_the_release_it_was_read_from():
    import re

    from amplint.analysis.flow import LIBRARY_SINKS

    cited = re.compile(r"^[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]* [\w/.-]+\.py:\d+( \(.+\))?$")
    libraries = set()
    for name, sinks in LIBRARY_SINKS.items():
        for sink in sinks:
            assert cited.match(sink.source), (name, sink.source)
            assert name.partition(".")[0].replace("_", "-") in sink.source.replace("_", "-"), (name, sink.source)
            libraries.add(sink.source.partition("==")[0])
    assert {"allennlp", "kornia", "segment-anything", "timm"} <= libraries
