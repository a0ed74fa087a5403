"""verify's findings and reports are typed records (amplint.verify.records), judged and
shown by attribute; their JSON keeps the documented shape (fields in order, the optional
ones only once decided) and the Python API gives plain data."""
import pytest

from conftest import fixture_path

pytest.importorskip("torch")

from amplint.verify import format_report, lintfix  # noqa: E402
from amplint.verify.records import Crash, Evidence, VerifyFinding, VerifyReport, plain, typed  # noqa: E402

BASE = ["code", "rule", "message", "path", "line", "end_line", "column", "end_column", "severity", "fix",
        "fix_description", "registrations", "levels", "evidence", "status", "after_evidence"]


def test_lint_gives_records():
    findings, errors = lintfix.lint([fixture_path("verify", "attention_mask.py")], "fp16", ["O1", "O2"], "cpu",
                                    lintfix.LintSettings())
    assert not errors and findings
    assert all(isinstance(f, VerifyFinding) for f in findings)  # a dict here is the old shape
    amp101 = next(f for f in findings if f.code == "AMP101")
    assert amp101.levels == ["O1", "O2"] and amp101.fix == "safe" and amp101.line == 27


def test_json_shape_and_round_trip():
    f = VerifyFinding("AMP101", "overflow-constant", "m", "/x.py", 3, 3, 5, 9, "error", fix="safe",
                      fix_description="d", levels=["O1"], evidence=[Evidence("O1", "crash", "RuntimeError: x", 3)], status="confirmed")
    assert list(f.to_json()) == BASE  # nothing decided after the first runs: no optional key
    f.fixed_by_lint, f.after_evidence, f.status, f.after_crash = True, [], "fixed run crashed", ["O1"]
    assert list(f.to_json()) == BASE + ["fixed_by_lint", "after_crash"]
    assert VerifyFinding.from_json(f.to_json()) == f
    report = VerifyReport("t", "cpu", "fp16", ["O1"], 1, 0, 0.01, "auto", "adamw", findings=[f])
    data = plain(report)
    assert data["findings"] == [f.to_json()] and "fp32_repaired" not in data
    assert list(data)[:3] == ["target", "device", "dtype"] and list(data)[-2:] == ["exit_status", "model_output"]
    assert typed(data) == report and isinstance(typed(data).findings[0], VerifyFinding)
    report.fp32_repaired = True
    assert list(plain(report)).index("fp32_repaired") == list(plain(report)).index("notes") + 1


def test_format_report_takes_the_plain_report(tmp_path):
    from amplint.verify import verify

    path = tmp_path / "m.py"
    path.write_text("import torch\n\n\ndef example():\n    return torch.nn.Linear(8, 8), (torch.randn(2, 8),)\n")
    report = verify(f"{path}::example", levels=("O1",), device="cpu", steps=1)
    assert isinstance(report["findings"], list) and all(isinstance(f, dict) for f in report["findings"])
    assert "safe at the selected levels" in format_report(report)


RUN = ["level", "dtype", "crash", "losses", "loss_scales", "skipped_steps", "output_rel_err", "loss_rel_err", "modules",
       "sites", "first_nonfinite_module", "first_nonfinite_site", "origin", "seconds", "nonfinite_loss"]


def test_level_runs_are_records_with_the_json_shape_of_the_dicts_they_replace(tmp_path):
    from amplint.verify import verify
    from amplint.verify.records import LevelRun

    path = tmp_path / "m.py"
    path.write_text("import torch\n\n\ndef example():\n    return torch.nn.Linear(8, 8), (torch.randn(2, 8),)\n")
    data = verify(f"{path}::example", levels=("O1",), device="cpu", steps=1)
    assert set(data["before"]) == {"O0", "O1"}
    for run in data["before"].values():  # plain data, the keys in the order the runner wrote them
        assert isinstance(run, dict) and list(run) == RUN + ["last_step_skipped", "executed"], list(run)
    report = typed(data)
    assert all(isinstance(r, LevelRun) for r in report.before.values()) and report.after is None
    assert report.before["O1"].dtype == "fp16" and len(report.before["O1"].losses) == 1
    assert plain(report) == data
    crashed = LevelRun("O2", "fp16", crash=Crash("RuntimeError", "", "forward", 0))  # no optimizer step taken: no last_step_skipped
    assert list(crashed.to_json()) == RUN + ["executed"] and LevelRun.from_json(crashed.to_json()) == crashed


def test_the_items_of_a_level_run_are_records_too(tmp_path):
    """The crash, each module's and op site's statistics, the origin of the first inf/NaN,
    the findings' evidence and the run-time problems are typed records; their JSON has the keys (and key order) of the
    plain data they replace, and it reads back as the same records."""
    from amplint.verify import verify
    from amplint.verify.records import (Evidence, ForwardStats, GradStats, ModuleStats, Origin, OriginEvidence,
                                        OriginProblem, Problem, Site, SiteRef, VerifyReport)

    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n\n\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.proj = torch.nn.Linear(8, 8)\n\n    def forward(self, x):\n"
        "        return self.proj(x * 1e5) * 1e5\n\n\ndef example():\n    return M(), (torch.randn(2, 8),)\n")
    data = verify(f"{path}::example", levels=("O1",), device="cpu", steps=1)
    report = typed(data)
    run = report.before["O1"]
    assert run.modules and all(isinstance(m, ModuleStats) for m in run.modules)
    model = run.modules[0]
    assert isinstance(model.forward, ForwardStats) and isinstance(model.grad, GradStats) and model.source.line == 4
    assert list(model.to_json()) == ["weight_shape", "name", "class", "source", "constructed", "forward", "grad"]
    assert list(model.to_json()["grad"])[-1] == "first_new_nonfinite" and "order" not in model.to_json()["grad"]
    assert run.sites and all(isinstance(s, Site) for s in run.sites)
    assert isinstance(run.origin, Origin) and run.origin.line == 10 and run.origin.step == 0
    assert isinstance(run.first_nonfinite_site, SiteRef) and run.first_nonfinite_site.expr is None
    assert list(run.origin.to_json()) == ["file", "line", "op", "end_line", "column", "end_column", "expr",
                                          "inputs_finite", "output", "step"]
    evidence = [e for f in report.findings for e in f.evidence]
    assert evidence and all(isinstance(e, Evidence) for e in evidence)
    origin = [e for e in evidence if isinstance(e, OriginEvidence)]
    assert origin and list(origin[0].to_json()) == ["level", "kind", "line", "detail"]  # as the runner always wrote it
    assert report.problems and all(isinstance(p, Problem) for p in report.problems)
    traced = [p for p in report.problems if isinstance(p, OriginProblem)]
    assert traced and list(traced[0].to_json()) == ["level", "kind", "file", "line", "column", "module", "origin",
                                                    "detail", "explained_by"]
    assert plain(report) == data and plain(VerifyReport.from_json(plain(report))) == data
    assert VerifyReport.from_json(plain(report)) == report
