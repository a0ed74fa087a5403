"""Command-line conventions (issue 25): no abbreviations, "did you mean", Ruff's option
names, --show-settings / --show-files, -q --statistics, verify's PATH::FACTORY errors."""
import json

APEX = "from apex import amp\n"
WARN = "import torch\n\ndef f(x):\n    return x / (x.sum() + 1e-6)\n"


def test_check_fix_is_not_an_abbreviation_of_fix_style(tmp_path, amplint):
    (tmp_path / "m.py").write_text(APEX)
    proc = amplint("check", "--fix", "m.py", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice" not in proc.stderr
    assert "unrecognized arguments: --fix" in proc.stderr and "use `amplint fix`" in proc.stderr
    for abbreviated in (["--sel", "AMP5"], ["--stat"], ["--out", "json"]):  # allow_abbrev=False everywhere
        bad = amplint("check", *abbreviated, "m.py", cwd=tmp_path)
        assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr, abbreviated
    assert amplint("fix", "--diff", "--unsafe", "m.py", cwd=tmp_path).returncode == 2


def test_misspelt_option_gets_did_you_mean(tmp_path, amplint):
    proc = amplint("check", "--targte", "bf16", ".", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("amplint check: error: unrecognized arguments: --targte (did you mean `--target`?)")
    assert "try `amplint check --help`" in proc.stderr
    proc = amplint("fix", "--unsafe-fix", ".", cwd=tmp_path)
    assert "did you mean `--unsafe-fixes`?" in proc.stderr


def test_output_format_is_an_alias_of_format(tmp_path, amplint):
    (tmp_path / "m.py").write_text(APEX)
    proc = amplint("check", "--no-cache", "--output-format", "json", "m.py", cwd=tmp_path)
    assert proc.returncode == 1 and json.loads(proc.stdout)[0]["code"] == "AMP501"


def test_quiet_statistics_prints_the_counts_only(tmp_path, amplint):
    (tmp_path / "a.py").write_text(APEX)
    (tmp_path / "b.py").write_text(APEX + WARN)
    for args in (["-q", "--statistics"], ["--statistics", "-q"]):
        proc = amplint("check", "--no-cache", *args, cwd=tmp_path)
        assert proc.returncode == 1
        assert proc.stdout.splitlines() == ["2  AMP501  [*] apex-amp-import", "1  AMP102  [-] underflow-epsilon"], proc.stdout


def test_show_settings_and_show_files(tmp_path, amplint):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget = "bf16"\nextend-exclude = ["gen"]\n'
                                             'per-file-ignores = { "tests/*" = ["AMP1"] }\n')
    (tmp_path / "src").mkdir()
    (tmp_path / "gen").mkdir()
    (tmp_path / "src" / "m.py").write_text(APEX)
    (tmp_path / "gen" / "g.py").write_text(APEX)
    proc = amplint("check", "--show-settings", "--opt-level", "O2", "src/m.py", cwd=tmp_path)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "# settings for src/m.py" and lines[1] == f"# config: {tmp_path / 'pyproject.toml'}"
    assert 'target = "bf16"' in lines and 'opt-level = "O2"' in lines and 'extend-exclude = ["gen"]' in lines
    assert 'per-file-ignores = { "tests/*" = ["AMP1"] }' in lines and "fail-on = \"warning\"" in lines
    import tomllib

    assert tomllib.loads("\n".join(lines))["tool"]["amplint"]["target"] == "bf16"  # it is TOML
    (tmp_path / "pyproject.toml").write_text(proc.stdout)  # and a config amplint takes as it is
    again = amplint("check", "--show-settings", "src/m.py", cwd=tmp_path)
    assert again.returncode == 0 and 'opt-level = "O2"' in again.stdout.splitlines(), again.stderr
    files = amplint("check", "--show-files", cwd=tmp_path)
    assert files.returncode == 0 and files.stdout == "src/m.py\n"


def test_verify_one_colon_says_what_was_expected_without_absolute_paths(tmp_path, amplint):
    (tmp_path / "harness.py").write_text("def build():\n    pass\n")
    proc = amplint("verify", "harness.py:build", cwd=tmp_path)
    assert proc.returncode == 2
    assert "expected PATH::FACTORY (two colons): did you mean 'harness.py::build'?" in proc.stderr
    assert str(tmp_path) not in proc.stderr
    missing = amplint("verify", "nothere.py::build", cwd=tmp_path)
    assert missing.returncode == 2 and "no such file: nothere.py (a target is PATH::FACTORY" in missing.stderr
    assert str(tmp_path) not in missing.stderr


def test_show_settings_of_a_broken_config_is_its_error_not_the_defaults(tmp_path, amplint):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nopt-level-given = true\n')
    (tmp_path / "m.py").write_text("import torch\n")
    proc = amplint("check", "--show-settings", "m.py", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("amplint: error: ") and "opt-level-given: unknown key" in proc.stderr
