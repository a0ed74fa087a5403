"""Language-server latency (issue 25): ``amplint server`` driven over stdio by a raw LSP
client (Content-Length framing, as an editor does).

- open: seconds from ``didOpen`` to the first ``publishDiagnostics`` (a fresh server
  process, initialized, the package warm in the OS cache: one throwaway run first);
- edit: seconds from a one-character ``didChange`` (a ranged, incremental change, as
  editors send while typing) to the ``publishDiagnostics`` of that version, on a
  2,000-line model file; ``--edits`` of them, one at a time.

Targets: open <= 1 s, edit <= 0.15 s.  Usage::

    .venv/bin/python bench/lsp_latency.py [--lines 2000] [--edits 30] [--runs 3] [--pause 0.4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BLOCK = '''\
class Block{i}(nn.Module):
    """A transformer block."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(mask, -1e9)
        attn = torch.softmax(scores, dim=-1)
        out = attn @ v
        var = out.pow(2).mean(-1, keepdim=True)
        out = out / torch.sqrt(var + 1e-8)
        return x + self.proj(out)

'''


def model_file(lines: int) -> str:
    head = "import math\n\nimport torch\nimport torch.nn as nn\n\n\n"
    blocks, i = [], 0
    while len("".join(blocks).splitlines()) + 6 < lines:
        blocks.append(BLOCK.format(i=i))
        i += 1
    return head + "".join(blocks)


class Client:
    def __init__(self, root: str):
        script = shutil.which("amplint", path=os.path.dirname(sys.executable))
        self.proc = subprocess.Popen([script, "server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(os.environ.get("LSP_BENCH_STDERR", os.devnull), "w"), cwd=root)
        self.next_id = 0

    def send(self, method: str, params: dict, request: bool = False) -> int:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            message["id"] = self.next_id
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return message.get("id", 0)

    def read(self) -> dict:
        length = 0
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("the server closed its output")
            if line.startswith(b"Content-Length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length:
                return json.loads(self.proc.stdout.read(length))

    def wait(self, predicate) -> dict:
        while True:
            message = self.read()
            if predicate(message):
                return message

    def close(self) -> None:
        self.send("shutdown", {}, request=True)
        self.send("exit", {})
        self.proc.wait(30)


def one_run(root: str, text: str, edits: int, pause: float = 0.0) -> tuple[float, list[float]]:
    uri = "file://" + os.path.join(root, "model.py")
    client = Client(root)
    rid = client.send("initialize", {"processId": os.getpid(), "rootUri": "file://" + root, "capabilities": {
        "general": {"positionEncodings": ["utf-8"]}}}, request=True)
    client.wait(lambda m: m.get("id") == rid)
    client.send("initialized", {})
    started = time.perf_counter()
    client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
    client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
    opened = time.perf_counter() - started
    line = len(text.splitlines()) // 2
    times = []
    width = len(text.splitlines()[line])
    for version in range(2, edits + 2):
        # typing: one more character of a comment at the end of a line in the middle
        typed = "  # n" if version == 2 else "o"
        at = width + (0 if version == 2 else 5 + version - 3)
        change = {"range": {"start": {"line": line, "character": at}, "end": {"line": line, "character": at}}, "text": typed}
        if pause:
            time.sleep(pause)  # the whole-document lint of the previous edit is running now
        started = time.perf_counter()
        client.send("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
        client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"].get("version") == version)
        times.append(time.perf_counter() - started)
    client.close()
    return opened, times


def cpu_costs(text: str, edits: int) -> None:
    """CPU seconds (``time.process_time``: what a loaded machine does not inflate) of the
    server's own work, in this process: the whole-document lint, and the fast pass after
    each one-character edit."""
    from amplint.incremental import relint  # noqa: F401  (imported before timing)
    from amplint.lsp_lint import DocumentLinter

    linter = DocumentLinter(False, None)
    uri = "file:///tmp/bench/model.py"
    linter.lint_text(uri, text, 0)  # warm: rules loaded, modules imported
    started = time.process_time()
    base = linter.lint_text(uri, text, 1)
    whole = time.process_time() - started
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    costs = []
    for i in range(edits):
        edited = "".join(lines[:middle] + [lines[middle].rstrip("\n") + "  # n" + "o" * i + "\n"] + lines[middle + 1:])
        started = time.process_time()
        fast = linter.lint_fast(uri, edited, i + 2, base)
        costs.append(time.process_time() - started)
        assert not fast.whole
    print(f"CPU, in process: whole lint {whole:.3f} s ({len(base.findings)} findings); fast pass median "
          f"{statistics.median(costs) * 1000:.1f} ms, max {max(costs) * 1000:.1f} ms ({edits} edits)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--edits", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds between edits (0.4: each edit lands while the previous one's whole lint runs)")
    args = parser.parse_args()
    text = model_file(args.lines)
    cpu_costs(text, args.edits)
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "pyproject.toml"), "w") as fh:
            fh.write("[tool.amplint]\n")
        one_run(root, text, 1)  # warm the OS cache: the package, torch-free imports
        opens, edits = [], []
        for _ in range(args.runs):
            opened, times = one_run(root, text, args.edits, args.pause)
            opens.append(opened)
            edits.extend(times)
    print(f"file: {len(text.splitlines())} lines, {len(text)} characters")
    print(f"didOpen -> diagnostics: median {statistics.median(opens):.3f} s, max {max(opens):.3f} s ({args.runs} runs)")
    edits.sort()
    p90 = edits[int(0.9 * (len(edits) - 1))]
    print(f"didChange -> diagnostics: median {statistics.median(edits):.3f} s, p90 {p90:.3f} s, "
          f"max {max(edits):.3f} s ({len(edits)} edits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
