"""``amplint server`` end to end: the installed console script driven by a real LSP
client (pytest-lsp) over stdio."""
import os
import shutil
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

SCRIPT = shutil.which("amplint", path=os.path.dirname(sys.executable))
MASK = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"
UNALIGNED = "import torch.nn as nn\n\nlayer = nn.Linear(768, 1001)\n"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[SCRIPT, "server"]))
async def client(lsp_client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nper-file-ignores = { 'quiet.py' = ['AMP101'] }\n")
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="project")]))
    lsp_client.project = tmp_path
    yield
    await lsp_client.shutdown_session()


async def _open(client, name, text):
    uri = (client.project / name).as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return uri


@pytest.mark.asyncio
async def test_diagnostics_on_open_and_change_with_config(client: LanguageClient):
    uri = await _open(client, "model.py", MASK)
    (diag,) = client.diagnostics[uri]
    assert diag.code == "AMP101" and diag.source == "amplint" and diag.severity == types.DiagnosticSeverity.Error
    assert (diag.range.start.line, diag.range.start.character) == (4, 36)  # 0-based, at -1e9
    # the rule's page, docs/rules/AMP101.md (tests/test_docs.py: it exists and is current)
    assert diag.code_description.href == "https://github.com/amplint/amplint/blob/main/docs/rules/AMP101.md"
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="x = 1\n")]))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert not client.diagnostics[uri]
    quiet = await _open(client, "quiet.py", MASK)  # per-file-ignores of the project's pyproject.toml
    assert not client.diagnostics[quiet]
    assert not (client.project / "model.py").exists()  # the editor's text, nothing written


@pytest.mark.asyncio
async def test_quick_fixes_fix_all_and_hover(client: LanguageClient):
    uri = await _open(client, "model.py", MASK + "\n" + UNALIGNED.replace("import torch.nn as nn\n\n", "import torch.nn as nn\n"))
    diagnostics = client.diagnostics[uri]
    assert sorted(d.code for d in diagnostics) == ["AMP101", "AMP201"]
    everything = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=20, character=0))
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=everything,
        context=types.CodeActionContext(diagnostics=diagnostics, only=[types.CodeActionKind.QuickFix])))
    titles = {a.title: a for a in actions}
    safe = [a for a in actions if a.title.startswith("AMP101")]
    unsafe = [a for a in actions if a.title.startswith("AMP201")]
    assert safe and safe[0].is_preferred and "unsafe" not in safe[0].title, titles
    assert unsafe and not unsafe[0].is_preferred and unsafe[0].title.endswith("(unsafe fix)")
    (edit,) = safe[0].edit.changes[uri]
    assert edit.new_text == "torch.finfo(scores.dtype).min" and edit.range.start.line == 4

    fix_all = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=everything,
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.amplint"])))
    (action,) = fix_all
    (region,) = action.edit.changes[uri]  # the changed region only, the unsafe AMP201 fix left out
    assert region.new_text == "torch.finfo(scores.dtype).min" and (region.range.start.line, region.range.end.line) == (4, 4)

    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=4, character=38)))
    assert "**AMP101** (overflow-constant)" in hover.contents.value
    assert "[docs](https://github.com/amplint/amplint/blob/main/docs/rules/AMP101.md)" in hover.contents.value


@pytest.mark.asyncio
async def test_unparsable_document_is_one_diagnostic(client: LanguageClient):
    uri = await _open(client, "broken.py", "import torch\ndef f(:\n")
    (diag,) = client.diagnostics[uri]
    assert diag.range.start.line == 1 and "syntax error" in diag.message


def test_server_without_pygls_names_the_extra(tmp_path, amplint):
    # a pygls that cannot be imported, first on the path: as in an install without the extra
    (tmp_path / "pygls").mkdir()
    (tmp_path / "pygls" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pygls'\", name='pygls')\n")
    proc = amplint("server", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, input="")
    assert proc.returncode == 2
    assert proc.stderr == 'amplint server needs pygls: pip install "amplint[lsp]"\n'
