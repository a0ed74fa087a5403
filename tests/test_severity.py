"""Severity in the output and ``--fail-on`` (issue 25): a run whose findings are all
``info`` exits 0 by default and still counts them."""
import textwrap

INFO_ONLY = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Attention(nn.Module):
        def forward(self, q, k, v):
            scores = q @ k.transpose(-2, -1)
            attn = F.softmax(scores, dim=-1)  # probabilities
            return attn @ v
    """)
# an unaligned vocabulary: a warning at any opt level (an eps on a sum is info under O1,
# which computes the sum in fp32)
WARNING = ("import torch.nn as nn\n\n\nclass LM(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.wte = nn.Embedding(50257, 768)\n")
ERROR = "import torch\n\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"


def test_text_and_concise_show_the_severity(tmp_path, amplint):
    (tmp_path / "a.py").write_text(INFO_ONLY)
    (tmp_path / "b.py").write_text(ERROR)
    text = amplint("check", "--no-cache", cwd=tmp_path).stdout
    assert "a.py:9:16: AMP301 info: `F.softmax`" in text and "b.py:4:29: AMP101 [-] error: " in text
    concise = amplint("check", "--no-cache", "--format", "concise", cwd=tmp_path).stdout.splitlines()
    assert concise[0].startswith("a.py:9:16: AMP301 info: ") and concise[1].startswith("b.py:4:29: AMP101 [-] error: ")
    quiet = amplint("check", "--no-cache", "-q", cwd=tmp_path).stdout.splitlines()
    assert quiet[0].startswith("a.py:9:16: AMP301 info: ")


def test_info_findings_do_not_fail_the_run_unless_fail_on_info(tmp_path, amplint):
    (tmp_path / "m.py").write_text(INFO_ONLY)
    proc = amplint("check", "--no-cache", cwd=tmp_path)
    assert proc.returncode == 0 and "Found 1 finding" in proc.stdout  # counted, not failing
    assert amplint("check", "--no-cache", "--format", "github", cwd=tmp_path).returncode == 0
    assert amplint("check", "--no-cache", "--fail-on", "info", cwd=tmp_path).returncode == 1
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nfail-on = "info"\n')
    assert amplint("check", "--no-cache", cwd=tmp_path).returncode == 1
    assert amplint("check", "--no-cache", "--fail-on", "warning", cwd=tmp_path).returncode == 0  # the option wins
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nfail-on = "notice"\n')
    bad = amplint("check", "--no-cache", cwd=tmp_path)
    assert bad.returncode == 2 and "fail-on: must be one of error, warning, info" in bad.stderr


def test_fail_on_error_lets_warnings_pass(tmp_path, amplint):
    (tmp_path / "w.py").write_text(WARNING)
    assert amplint("check", "--no-cache", cwd=tmp_path).returncode == 1
    assert amplint("check", "--no-cache", "--fail-on", "error", cwd=tmp_path).returncode == 0
    (tmp_path / "e.py").write_text(ERROR)
    assert amplint("check", "--no-cache", "--fail-on", "error", cwd=tmp_path).returncode == 1
    # errors reading a file still exit 2 whatever the threshold
    (tmp_path / "broken.py").write_text("def (:\n")
    assert amplint("check", "--no-cache", "--fail-on", "error", cwd=tmp_path).returncode == 2


def test_fix_leaves_only_info_findings_exit_0(tmp_path, amplint):
    (tmp_path / "m.py").write_text(INFO_ONLY)
    proc = amplint("fix", "--no-cache", "--diff", cwd=tmp_path)
    # no fix: O1 already runs this softmax in fp32 (issue 24), and the info finding left
    # does not fail the run
    assert proc.returncode == 0 and "No fixes to apply; 1 would remain." in proc.stderr
    assert amplint("check", "--no-cache", "--select", "AMP301", "--fail-on", "info", cwd=tmp_path).returncode == 1
