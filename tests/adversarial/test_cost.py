"""The adversarial report of 2026-12-01, N77: helper-chain analysis was quadratic (3,000
helpers: 50 s; each link's finding carried the whole chain as related locations).  The
chain is summarised once per helper now and a value's trail is capped, so 3,000 helpers
lint in seconds; bench/chain_cost.py measures 1,000-10,000."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from chain_cost import helpers  # noqa: E402


def test_n77_a_chain_of_3000_helpers_is_linear(tmp_path, amplint):
    (tmp_path / "chain.py").write_text(helpers(3000))
    proc = amplint("check", "--no-cache", "--format", "json", "chain.py", cwd=tmp_path, timeout=90,
                   env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 1
    findings = json.loads(proc.stdout)
    findings = findings["findings"] if isinstance(findings, dict) else findings
    assert any(f["line"] == 6006 for f in findings)  # the forward's h0(s, m, -1e9)
    assert max(len(f.get("related") or ()) for f in findings) <= 9


def test_n76_an_alias_chain_of_20000_is_folded(tmp_path, amplint):
    from chain_cost import aliases

    (tmp_path / "aliases.py").write_text(aliases(20000))
    proc = amplint("check", "--no-cache", "--format", "concise", "aliases.py", cwd=tmp_path, timeout=90,
                   env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 1 and "aliases.py:20004:" in proc.stdout and " AMP101 " in proc.stdout
