"""The language server under the adversarial report's cases (N3, N6, N9, N10, N16, N19,
N20) and issue 25's position encodings: the installed ``amplint server`` driven by a
real LSP client (pytest-lsp) over stdio."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

SCRIPT = shutil.which("amplint", path=os.path.dirname(sys.executable))
ASTRAL = ("import torch\n"
          "class M(torch.nn.Module):\n"
          "    def forward(self, s, m):\n"
          "        e = 'é😀'; return torch.softmax(s.masked_fill(m, -1e9), -1)  # 𝔘𝔫𝔦\n")
UNITS = {"utf-8": lambda t: len(t.encode("utf-8")), "utf-16": lambda t: len(t.encode("utf-16-le")) // 2,
         "utf-32": len}


def apply_edits(text: str, edits, encoding: str) -> str:
    """What an editor does with ``edits`` (LSP ranges in ``encoding`` code units)."""
    lines = text.splitlines(keepends=True)

    def offset(pos) -> int:
        line = lines[pos.line] if pos.line < len(lines) else ""
        units, index = 0, 0
        while index < len(line) and units < pos.character:
            units += UNITS[encoding](line[index])
            index += 1
        return sum(len(x) for x in lines[: pos.line]) + index

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
        lines = text.splitlines(keepends=True)
    return text


def _edits(action, uri):
    edit = action.edit
    if edit.document_changes:
        (change,) = edit.document_changes
        assert change.text_document.uri == uri
        return change.edits, change.text_document.version
    return edit.changes[uri], None


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[SCRIPT, "server"]),
                    params=["utf-8", "utf-16", "utf-32"])
async def client(lsp_client: LanguageClient, tmp_path, request):
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(
            general=types.GeneralClientCapabilities(position_encodings=[request.param]),
            workspace=types.WorkspaceClientCapabilities(
                workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True))),
        root_uri=tmp_path.as_uri()))
    assert result.capabilities.position_encoding == request.param
    lsp_client.encoding = request.param
    lsp_client.project = tmp_path
    yield
    await lsp_client.shutdown_session()


async def _open(client, name, text, version=1):
    uri = (client.project / name).as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
    return uri


def _whole(lines=100):
    return types.Range(start=types.Position(line=0, character=0), end=types.Position(line=lines, character=0))


@pytest.mark.asyncio
async def test_positions_and_edits_in_the_negotiated_encoding(client: LanguageClient):
    uri = await _open(client, "m.py", ASTRAL)
    line = ASTRAL.splitlines()[3]
    by_code = {d.code: d for d in client.diagnostics[uri]}
    at = line.index("-1e9")
    assert by_code["AMP101"].range.start == types.Position(line=3, character=UNITS[client.encoding](line[:at]))
    assert by_code["AMP101"].range.end.character == UNITS[client.encoding](line[: at + 4])
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=by_code["AMP101"].range,
        context=types.CodeActionContext(diagnostics=[by_code["AMP101"]], only=[types.CodeActionKind.QuickFix])))
    (fix,) = [a for a in actions if a.title.startswith("AMP101")]
    edits, version = _edits(fix, uri)
    assert version == 1
    fixed = apply_edits(ASTRAL, edits, client.encoding)
    assert "masked_fill(m, torch.finfo(s.dtype).min)" in fixed and "e = 'é😀'; return" in fixed and "# 𝔘𝔫𝔦" in fixed
    compile(fixed, "m.py", "exec")
    (fix_all,) = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=_whole(),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.amplint"])))
    edits, version = _edits(fix_all, uri)
    assert version == 1
    everything = apply_edits(ASTRAL, edits, client.encoding)
    compile(everything, "m.py", "exec")
    assert "# 𝔘𝔫𝔦" in everything and "torch.finfo(s.dtype).min" in everything


@pytest.mark.asyncio
async def test_n10_fix_all_on_a_unicode_escape_document_keeps_its_lines(client: LanguageClient):
    text = ('# -*- coding: unicode_escape -*-\nimport torch\ns = "\\x41"\n'
            "class M(torch.nn.Module):\n    def forward(self, s, m):\n"
            "        return torch.softmax(s.masked_fill(m, -1e9), -1)\n")
    uri = await _open(client, "u.py", text)
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=_whole(),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.amplint"])))
    for action in actions:
        edits, _ = _edits(action, uri)
        fixed = apply_edits(text, edits, client.encoding)
        assert fixed.count("\n") == text.count("\n") and 's = "\\x41"' in fixed


@pytest.mark.asyncio
async def test_n9_a_cp1252_buffer_is_linted_as_the_editor_holds_it(client: LanguageClient):
    text = "# -*- coding: cp1252 -*-\n# Á café\nimport torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
    uri = await _open(client, "c.py", text)
    assert [d.code for d in client.diagnostics[uri]] == ["AMP101"]


@pytest.mark.asyncio
async def test_n6_a_document_not_open_is_no_traceback(client: LanguageClient):
    actions = await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///nonexistent/x.py"), range=_whole(),
        context=types.CodeActionContext(diagnostics=[]))), 20)
    assert not actions


@pytest.mark.asyncio
async def test_n16_a_huge_document_is_one_diagnostic_not_minutes(client: LanguageClient):
    line = "y = s.masked_fill(m, -1e9)\n"
    uri = await _open(client, "huge.py", "import torch\n" + line * (2_100_000 // len(line)))
    (diag,) = client.diagnostics[uri]
    assert "over the server's limit" in diag.message and diag.severity == types.DiagnosticSeverity.Information


@pytest.mark.asyncio
async def test_n20_a_stale_version_never_gets_a_fix_for_old_text(client: LanguageClient):
    uri = await _open(client, "m.py", ASTRAL)
    new = ASTRAL.replace("-1e9", "-1e10")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=new)]))
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=_whole(),
        context=types.CodeActionContext(diagnostics=[])))
    assert actions
    for action in actions:
        edits, version = _edits(action, uri)
        assert version == 2
        assert "-1e9" not in apply_edits(new, edits, client.encoding)


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_n19_exit_without_shutdown_is_1_and_with_it_0(tmp_path):
    init = _frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}})
    exit_ = _frame({"jsonrpc": "2.0", "method": "exit"})
    shutdown = _frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    proc = subprocess.run([SCRIPT, "server"], input=init + exit_, capture_output=True, timeout=60)
    assert proc.returncode == 1
    proc = subprocess.run([SCRIPT, "server"], input=init + shutdown + exit_, capture_output=True, timeout=60)
    assert proc.returncode == 0
    assert b"Traceback" not in proc.stdout


def _replies(out: bytes) -> list[dict]:
    replies = []
    while out:
        head, _, rest = out.partition(b"\r\n\r\n")
        length = int(head.split(b"Content-Length:")[1].split(b"\r\n")[0])
        replies.append(json.loads(rest[:length]))
        out = rest[length:]
    return replies


def test_n3_invalid_params_get_an_error_response(tmp_path):
    uri = (tmp_path / "m.py").as_uri()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": ASTRAL}}},
        {"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeAction", "params": {"textDocument": {"uri": uri}}},
        {"jsonrpc": "2.0", "id": 4, "method": "textDocument/hover",
         "params": {"textDocument": {"uri": 5}, "position": {"line": 0, "character": "x"}}},
        {"jsonrpc": "2.0", "id": 5, "method": "textDocument/hover",
         "params": {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}},
        {"jsonrpc": "2.0", "id": 9, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    proc = subprocess.run([SCRIPT, "server"], input=b"".join(map(_frame, messages)), capture_output=True, timeout=60)
    by_id = {r["id"]: r for r in _replies(proc.stdout) if "id" in r}
    assert by_id[3]["error"]["code"] == -32602 and by_id[4]["error"]["code"] == -32602
    assert "Traceback" not in json.dumps(by_id[3]) and "result" in by_id[5] and proc.returncode == 0


TWO_CLASSES = ("import torch\n\n\nclass A(torch.nn.Module):\n    def forward(self, s, m):\n"
               "        return s.masked_fill(m, -1e9)\n\n\nclass B(torch.nn.Module):\n    def forward(self, x):\n"
               "        y = x + 1\n        return torch.softmax(x, -1)\n")


@pytest.mark.asyncio
async def test_incremental_relint_matches_a_whole_lint(client: LanguageClient):
    uri = await _open(client, "inc.py", TWO_CLASSES)
    before = sorted((d.code, d.range.start.line) for d in client.diagnostics[uri])
    # an edit in class A adds a line and a hazard: B's findings move one line down
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=5, character=0), end=types.Position(line=5, character=0)),
            text="        t = s.masked_fill(m, -1e10)\n")]))
    edited = TWO_CLASSES.replace("        return s.masked_fill(m, -1e9)\n", "        t = s.masked_fill(m, -1e10)\n"
                                 "        return s.masked_fill(m, -1e9)\n")
    await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
    fast = sorted((d.code, d.range.start.line) for d in client.diagnostics[uri])
    fresh_uri = await _open(client, "fresh.py", edited)
    whole = sorted((d.code, d.range.start.line) for d in client.diagnostics[fresh_uri])
    assert fast == whole and len(whole) == len(before) + 1
    await asyncio.sleep(1.5)  # the whole-document lint that follows the fast pass
    assert sorted((d.code, d.range.start.line) for d in client.diagnostics[uri]) == whole
