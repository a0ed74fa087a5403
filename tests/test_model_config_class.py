"""AMP201 through the CLI: layers of a transformers-style modeling file take an
unannotated ``config``; the file's PreTrainedModel subclass declares ``config_class =
TinyConfig``, so ``config.vocab_size`` is TinyConfig's default (50265) even though another
linted config class has a different one.  Without the declaration the size stays unknown
(the two defaults disagree) and nothing is reported."""
import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "dims", "config_class")


def _amp201(amplint, folder):
    proc = amplint("check", "--select", "AMP201", "--output-format", "json", "--no-cache", str(folder), cwd=folder)
    assert proc.returncode in (0, 1), proc.stderr
    return sorted((os.path.basename(f["path"]), f["line"]) for f in json.loads(proc.stdout) if f["code"] == "AMP201")


def test_config_class_names_the_config_of_unannotated_layers(amplint, tmp_path):
    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURE, folder)
    assert _amp201(amplint, folder) == [("modeling_tiny.py", 16), ("modeling_tiny.py", 25)]


def test_without_config_class_the_size_is_unknown(amplint, tmp_path):
    folder = tmp_path / "tiny"
    shutil.copytree(FIXTURE, folder)
    model = folder / "modeling_tiny.py"
    model.write_text(model.read_text().replace("config_class = TinyConfig", "pass"))
    assert _amp201(amplint, folder) == []
