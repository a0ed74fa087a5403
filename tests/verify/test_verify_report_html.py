"""The HTML report (issue 14), rendered in headless Chromium: the DOM Chromium builds from the
file (``--dump-dom``) and a screenshot whose pixels are read back."""
from __future__ import annotations

import html
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


CHROMIUM = _chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium); CI installs it")
#: the first failing row's background and stripe (report_html's --first-bg and --first)
FIRST_FAILURE_BG = (0xFF, 0xF3, 0xC4)
FIRST_FAILURE_STRIPE = (0xFF, 0xD5, 0x4F)


def _chromium_cmd(profile, *args):
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
            f"--user-data-dir={profile}", *args]


def dump_dom(html_path, profile) -> str:
    proc = subprocess.run(_chromium_cmd(profile, "--dump-dom", "file://" + str(html_path)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def screenshot(html_path, profile, png, width=1280, height=1700):
    subprocess.run(_chromium_cmd(profile, f"--window-size={width},{height}", "--hide-scrollbars",
                                 f"--screenshot={png}", "file://" + str(html_path)), capture_output=True, timeout=120)
    return decode_png(png.read_bytes())


def decode_png(data: bytes) -> list[bytes]:
    """Rows of RGB(A) bytes of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
    raw = zlib.decompress(idat)
    stride, rows, prev, i = width * bpp, [], bytearray(width * bpp), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
                if kind == 1:
                    line[x] = (line[x] + a) & 255
                elif kind == 3:
                    line[x] = (line[x] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(_rgb(line, bpp))
        prev = line
    return rows


def _rgb(line: bytearray, bpp: int) -> bytes:
    if bpp == 3:
        return bytes(line)
    out = bytearray()
    for x in range(0, len(line), 4):
        out += line[x:x + 3]
    return bytes(out)


def longest_run(rows: list[bytes], color: tuple) -> tuple[int, int]:
    """(longest horizontal run of ``color`` in pixels, how many rows have a run of 200 px or more)."""
    target = bytes(color)
    best, wide_rows = 0, 0
    for row in rows:
        run = longest = 0
        for x in range(0, len(row), 3):
            run = run + 1 if row[x:x + 3] == target else 0
            longest = max(longest, run)
        best = max(best, longest)
        wide_rows += longest >= 200
    return best, wide_rows


def text_of(fragment: str) -> str:
    """The text a reader sees: block boundaries are spaces, inline tags nothing."""
    spaced = re.sub(r"</?(td|th|tr|br|p|li|ul|div|h\d|header|article|pre)\b[^>]*>", " ", fragment)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", spaced)).split())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "fixtures/verify/handwritten_norm.py::example",
         "fixtures/verify/attention_mask.py::example", "--device", "cpu", "--opt-level", "O1,O2", "--steps", "3",
         "--fix", "--unsafe-fixes", "--report", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert f"HTML report: {out}" in proc.stdout
    return out


def _section(dom: str, target: str) -> str:
    start = dom.index(f'data-target="{target}"')
    end = dom.find('<section class="target"', start)
    return dom[start:end if end != -1 else len(dom)]


def test_report_is_self_contained_and_script_free(report):
    text = report.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report must not load anything"
    assert "<script" not in text.lower()


@needs_chromium
def test_report_opens_with_the_verdict_per_level(report, tmp_path):
    dom = dump_dom(report, tmp_path / "profile")
    norm = _section(dom, "fixtures/verify/handwritten_norm.py::example")
    # the page's order: verdicts, finding cards, range charts, loss charts, tables
    order = [norm.index(x) for x in ('class="verdicts"', 'class="cards"', 'class="range-chart"', 'class="train"', 'class="levels"')]
    assert order == sorted(order)
    rows = dict(re.findall(r'<tr class="level-row [a-z]+" data-level="(O\d)" data-view="original code">(.*?)</tr>', norm, re.S))
    assert text_of(rows["O1"]).startswith("O1 ok ok")
    assert ("first non-finite at fixtures/verify/handwritten_norm.py:16:16 in self.weight * x / "
            "torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8) (div), module norm (RMSNorm)") in text_of(rows["O2"])
    assert "safe at the selected levels after the fixes (the original code: O2 inf/NaN)" in text_of(norm)
    mask = _section(dom, "fixtures/verify/attention_mask.py::example")
    rows = dict(re.findall(r'<tr class="level-row [a-z]+" data-level="(O\d)" data-view="original code">(.*?)</tr>', mask, re.S))
    assert ("crash at fixtures/verify/attention_mask.py:27 in scores.masked_fill(pad_mask[:, None, None, :], -1e9): "
            "RuntimeError: value cannot be converted to type c10::Half without overflow (forward, step 0)") in text_of(rows["O1"])


@needs_chromium
def test_one_card_per_finding_with_evidence_and_its_diff(report, tmp_path):
    dom = dump_dom(report, tmp_path / "profile")
    norm = _section(dom, "fixtures/verify/handwritten_norm.py::example")
    card = re.search(r'<article class="card finding good" data-code="AMP102" data-status="fixed">(.*?)</article>', norm, re.S).group(1)
    text = text_of(card)
    assert "`1e-8` becomes 0 in float16" in text  # the rule's message
    assert "O2 inf/NaN: first inf/NaN made by div" in text and "After the fixes (its own fix was applied)" in text
    assert re.search(r'<span class="del">-.*torch\.sqrt\(x\.pow\(2\).*1e-8\)', card)
    # the fp32 norm, Llama-style: the input cast up, the result cast back to its dtype
    assert re.search(r'<span class="add">\+.*x = x\.float\(\)', card)
    assert re.search(r'<span class="add">\+.*1e-8\)\)\.to\(input_dtype\)', card)
    mask = _section(dom, "fixtures/verify/attention_mask.py::example")
    card = re.search(r'data-code="AMP101" data-status="fixed">(.*?)</article>', mask, re.S).group(1)
    assert "O1 crash: RuntimeError: value cannot be converted" in text_of(card)
    assert re.search(r'<span class="add">\+.*torch\.finfo\(scores\.dtype\)\.min', card)


@needs_chromium
def test_chart_marks_only_the_first_failing_row_and_draws_the_crash_in_its_own_row(report, tmp_path):
    dom = dump_dom(report, tmp_path / "profile")
    norm = _section(dom, "fixtures/verify/handwritten_norm.py::example")
    chart = re.search(r'<div class="range-chart" data-level="O2" data-view="original code"[^>]*>(.*?)</div></section>', norm, re.S).group(1)
    marked = re.findall(r'<div class="row first-failure" data-module="([^"]+)"', chart)
    assert marked == ["norm"]  # the RMSNorm, not the head and model that carry its NaN on
    assert re.search(r'<div class="row op origin" data-op="div">.*?made the first inf/NaN', chart, re.S)
    later = re.search(r'<details class="collapsed later">(.*?)</details>', chart, re.S).group(1)
    assert "the inf/NaN carried on" in later and 'data-module="proj"' in later and "first-failure" not in later
    assert re.findall(r'class="row propagated" data-module="([^"]+)"', later)
    # the crash is a row of its own, after the modules that returned before it
    mask = _section(dom, "fixtures/verify/attention_mask.py::example")
    chart = re.search(r'<div class="range-chart" data-level="O1" data-view="original code"[^>]*>(.*?)</div></section>', mask, re.S).group(1)
    crash = re.search(r'<div class="row first-failure crash">(.*?)</div></div>', chart, re.S).group(1)
    assert "attention_mask.py:27" in crash and "c10::Half without overflow" in crash and 'class="bar"' not in crash
    assert chart.index('data-module="attn.qkv"') < chart.index("first-failure crash")
    # loss, loss scale and skipped steps per level, original and fixed
    assert sorted(re.findall(r'<svg class="train" data-level="(O\d)"', dom)) == sorted(["O0", "O1", "O2"] * 2)
    # after the fp32-norm fix the scaler only warms up (skips while the scale falls, then steps)
    train = re.search(r'<figure class="train-panel"><figcaption>3 of 3 steps skipped · after the fixes: [0-2] of 3 steps skipped'
                      r'</figcaption><svg class="train" data-level="O2"(.*?)</svg>', norm, re.S)
    assert train
    after_skips = int(re.search(r'after the fixes: (\d) of 3 steps skipped', train.group(0)).group(1))
    assert train.group(1).count('class="skipped"') == 3 + after_skips and "× nan" in train.group(1)


@needs_chromium
def test_screenshot_shows_the_marked_first_failing_row(report, tmp_path):
    from amplint.verify import report_html  # the colours the test looks for are the report's

    assert "--first-bg:#fff3c4" in report_html._CSS and "--first:#ffd54f" in report_html._CSS
    rows = screenshot(report, tmp_path / "profile", tmp_path / "shot.png")
    assert len(rows) == 1700
    run, wide = longest_run(rows, FIRST_FAILURE_BG)
    assert run >= 600 and wide >= 12, (run, wide)  # a full-width row background, a row tall
    stripe, _ = longest_run(rows, FIRST_FAILURE_STRIPE)
    assert 4 <= stripe <= 8, stripe  # the 6 px stripe at its left


@needs_chromium
def test_overflow_in_a_plain_mul_crosses_the_max_line_and_names_are_escaped(tmp_path, amplint):
    model = tmp_path / "deep.py"
    model.write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Block(nn.Module):
            def __init__(self, d, gain=1.0):
                super().__init__()
                self.fc = nn.Linear(d, d)
                self.gain = gain

            def forward(self, x):
                h = self.fc(x)
                return x + h * self.gain


        class Deep(nn.Module):
            def __init__(self, d=16, depth=6):
                super().__init__()
                self.blocks = nn.ModuleList([Block(d, gain=3e5 if i == 3 else 1.0) for i in range(depth)])
                self.add_module("</div><script>alert(1)</script><!--<script>", nn.Identity())

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x


        def example():
            return Deep(), (torch.randn(8, 16) * 4,)
    """).lstrip(), encoding="utf-8")
    out = tmp_path / "deep.html"
    proc = amplint("verify", "deep.py::example", "--device", "cpu", "--opt-level", "O2", "--steps", "1",
                   "--report", str(out), cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "<script" not in text and "&lt;/div&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text
    dom = dump_dom(out, tmp_path / "profile")
    chart = re.search(r'<div class="range-chart" data-level="O2"[^>]*>(.*?)</div></section>', dom, re.S).group(1)
    assert re.findall(r'<div class="row first-failure" data-module="([^"]+)"', chart) == ["blocks.3"]
    origin = re.search(r'<div class="row op origin" data-op="mul">(.*?)</div></div>', chart, re.S).group(1)
    assert "line 13:20" in origin
    left, width = map(float, re.search(r'class="bar" style="left:([\d.]+)%;width:([\d.]+)%', origin).groups())
    maximum = float(re.search(r'class="limit max" style="left:([\d.]+)%', origin).group(1))
    assert left < maximum < left + width and left + width >= 99.9  # past fp16's max, to the edge
    assert re.search(r'class="overflow">\d+ inf', origin)
    # the later blocks carry the inf/NaN on: collapsed, not marked
    later = re.search(r'<details class="collapsed later">(.*?)</details>', chart, re.S).group(1)
    assert 'data-module="blocks.4"' in later and "first-failure" not in later
