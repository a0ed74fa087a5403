"""One coordinate system for a fix's edits: a reported finding's edits are 0-based
*character* columns (like its own columns), from ``ctx.report`` on -- applied, cached,
written as JSON and sent to an editor alike.  Lines with non-ASCII and astral
characters (4 UTF-8 bytes, 2 UTF-16 units, 1 character) before the edit tell the three
apart."""
import json
import os
import shutil
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from amplint.config import Settings
from amplint.engine import apply_fixes, lint_text
from amplint.registry import all_rules

SCRIPT = shutil.which("amplint", path=os.path.dirname(sys.executable))
#: two astral characters and an é before the edit: characters, UTF-8 bytes and UTF-16
#: units all differ there
ASTRAL = 'import torch\n\n\ndef attend(scores, mask):\n    s = "😀😀é"; return scores.masked_fill(mask, -1e9)\n'
ASTRAL_LINE = ASTRAL.splitlines()[4]


def _amp101(text):
    findings, ctx, errors = lint_text("m.py", text, Settings(), all_rules())
    assert not errors
    (f,) = [f for f in findings if f.code == "AMP101"]
    return f, ctx


def test_reported_edit_is_in_characters():
    f, ctx = _amp101(ASTRAL)
    (edit,) = f.fix.edits
    char = ASTRAL_LINE.index("-1e9")
    assert (edit.start.col, edit.end.col) == (char, char + 4)  # bytes would be char + 5 (😀 is 4 bytes, é 2)
    assert (f.column, f.end_column) == (char + 1, char + 5)  # the same system as the finding's own columns
    new, applied = apply_fixes(ctx, [f.fix])
    assert applied == 1 and new == ASTRAL.replace("-1e9", "torch.finfo(scores.dtype).min")


def test_cli_json_columns_and_fix(tmp_path, amplint):
    path = tmp_path / "m.py"
    path.write_text(ASTRAL, encoding="utf-8")
    proc = amplint("check", "--no-cache", "--output-format", "json", str(path))
    data = json.loads(proc.stdout)
    findings = data if isinstance(data, list) else data["findings"]
    (f,) = [f for f in findings if f["code"] == "AMP101"]
    (edit,) = f["fix"]["edits"]
    char = ASTRAL_LINE.index("-1e9")
    assert (edit["column"], edit["end_column"]) == (f["column"], f["end_column"]) == (char + 1, char + 5)
    proc = amplint("fix", "--no-cache", "--unsafe-fixes", str(path))
    assert proc.returncode in (0, 1), proc.stderr
    assert path.read_text(encoding="utf-8") == ASTRAL.replace("-1e9", "torch.finfo(scores.dtype).min")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[SCRIPT, "server"]))
async def client(lsp_client: LanguageClient, tmp_path):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="project")]))
    lsp_client.project = tmp_path
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_language_server_edit_in_utf16(client: LanguageClient):
    uri = (client.project / "m.py").as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=ASTRAL)))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    diagnostics = [d for d in client.diagnostics[uri] if d.code == "AMP101"]
    char = ASTRAL_LINE.index("-1e9")
    utf16 = char + 2  # two astral characters before it, each two UTF-16 units
    assert (diagnostics[0].range.start.line, diagnostics[0].range.start.character) == (4, utf16)
    everything = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=9, character=0))
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=everything,
        context=types.CodeActionContext(diagnostics=diagnostics, only=[types.CodeActionKind.QuickFix])))
    (edit,) = [a for a in actions if a.title.startswith("AMP101")][0].edit.changes[uri]
    assert edit.new_text == "torch.finfo(scores.dtype).min"
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.character) == (4, utf16, utf16 + 4)
