"""Worker results are typed records (amplint.pipeline.CheckEntry & co.), not dicts: what
a worker, a piece of a large file and the cache give back has one shape."""
import dataclasses
import json

import pytest

from amplint import cache
from amplint import pipeline as engine  # the many-file pipeline: its workers and records
from amplint.config import Settings
from amplint.rule import Finding

MASK = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"


def test_check_task_returns_a_typed_entry(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MASK)
    engine._init_worker(None)
    entry = engine._check_task((str(path), Settings(), False))
    assert isinstance(entry, engine.CheckEntry)  # a dict here is the old shape
    (finding,) = entry.findings
    assert isinstance(finding, Finding) and finding.node is None and finding.fingerprint
    assert entry.frames == {5: MASK.splitlines()[4]} and entry.summary["path"] == str(path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.findings = ()
    # the cache's record round-trips, and has the shape the cache accepts
    record = json.loads(json.dumps(entry.to_json()))  # as cache.put writes it
    assert cache.valid_entry(record, str(path))
    assert engine.CheckEntry.from_json(record) == entry


def test_unreadable_and_broken_files_are_entries_too(tmp_path):
    engine._init_worker(None)
    broken = tmp_path / "b.py"
    broken.write_text("import torch\ndef f(:\n")
    for path in (broken, tmp_path / "missing.py"):
        entry = engine._check_task((str(path), Settings(), False))
        assert isinstance(entry, engine.CheckEntry) and entry.errors and not entry.findings


def test_summary_and_piece_tasks_are_typed(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MASK)
    engine._init_worker(None)
    outcome = engine._summarize_task((str(path), Settings()))
    assert isinstance(outcome, engine.SummaryOutcome) and outcome.summary["path"] == str(path)
    lines = engine._Lines(MASK)
    part, preamble = engine._lint_piece(str(path), lines, 1, 6, (), Settings(), False, None)
    assert isinstance(part, engine.CheckEntry) and [f.code for f in part.findings] == ["AMP101"]
    joined = engine._join_pieces(str(path), [part])
    assert joined.findings[0].fingerprint.endswith(":0") and joined.summary["path"] == str(path)
