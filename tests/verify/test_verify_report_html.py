"""The HTML report, rendered in headless Chromium: the page the script builds, not just the file."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


CHROMIUM = _chromium()


def _dump_dom(html_path, profile):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", "file://" + str(html_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "fixtures/verify/handwritten_norm.py::example",
         "fixtures/verify/attention_mask.py::example", "--device", "cpu", "--opt-level", "O1,O2", "--steps", "1",
         "--fix", "--unsafe-fixes", "--report", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert f"HTML report: {out}" in proc.stdout
    return out


def test_report_is_self_contained(report):
    text = report.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report must not load anything"
    assert "<script" in text and "<svg" not in text.split("<script", 1)[0]  # the SVG is drawn by the script


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium); CI installs it")
def test_report_renders_charts_and_tables_in_chromium(report, tmp_path):
    dom = _dump_dom(report, tmp_path / "profile")
    assert 'data-rendered="yes"' in dom, "the report's script did not run to the end"
    # one chart per level, for the original code and after the fixes, for both targets
    charts = re.findall(r'<svg[^>]*class="range-chart"[^>]*data-level="(O\d)"', dom)
    assert sorted(charts) == sorted(["O0", "O1", "O2"] * 4)
    # the module rows carry the module names, and the dtype limits are drawn
    for name in ("norm", "embed", "proj", "attn.qkv", "head"):
        assert f'data-module="{name}"' in dom
    assert dom.count('data-limit="max"') == 12 and dom.count('data-limit="smallest subnormal"') == 12
    # the O2 run of the hand-written norm has inf/NaN marks; the crash is written on the chart
    assert 'class="nonfinite"' in dom
    assert "crashed: RuntimeError: value cannot be converted to type c10::Half without overflow" in dom
    # the findings table and the module table exist with the real content
    assert re.search(r"<td>AMP101</td>.*?<td[^>]*>fixed</td>", dom, re.S)
    assert re.search(r"<td>AMP102</td>.*?<td[^>]*>fixed</td>", dom, re.S)
    assert '<table class="modules">' in dom and "torch.nn.modules.linear.Linear" in dom
    # what the text report says is in the page too (issue 16, D8): per level the loss, the loss
    # scale, the skipped steps and the first failure's source line; the first module whose
    # output went inf/NaN is singled out on its chart
    assert dom.count('<table class="levels">') == 4
    assert "<th>first failure (source line)</th>" in dom and "<th>loss scale</th>" in dom
    assert re.search(r"<td>O2</td><td[^>]*>inf/NaN</td>(<td>[^<]*</td>){3}<td>[^<]*handwritten_norm\.py:16:16 [^<]*\(div\), "
                     r"module norm", dom)
    assert re.search(r"<td>O2</td><td[^>]*>CRASH</td>(<td>[^<]*</td>){3}<td>[^<]*attention_mask\.py:27 RuntimeError", dom)
    assert 'class="first-failure"' in dom and "first inf/NaN" in dom
    # the crash is written on its own line above the module rows, not over a module's bar
    crashed = re.search(r'<svg[^>]*class="range-chart"[^>]*>(?:(?!</svg>).)*?class="crash"(?:(?!</svg>).)*</svg>', dom, re.S).group(0)
    crash_y = float(re.search(r'<text x="[\d.]+" y="([\d.]+)"[^>]*class="crash"', crashed).group(1))
    rows_y = [float(y) for y in re.findall(r'class="module-row"[^>]*><text x="[\d.]+" y="([\d.]+)"', crashed)]
    assert rows_y and crash_y < min(rows_y) - 8


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium); CI installs it")
def test_report_screenshot_is_not_blank(report, tmp_path):
    png = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1200,900", f"--screenshot={png}", "file://" + str(report)]
    subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000  # a white page compresses to a few KB
