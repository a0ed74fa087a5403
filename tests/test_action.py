"""The composite GitHub Action (action.yml, issue 25), run step by step as a workflow runs it:
each `run` step with bash -eo pipefail and the environment GitHub gives it (inputs through
`env`, GITHUB_OUTPUT, RUNNER_TEMP); the upload step (github/codeql-action/upload-sarif) is
stood in for by the check that upload makes: the file exists and is valid SARIF.

Why these tests are slow (~20 CPU-s together; about 90 s of wall time on the loaded 2-core
machine): each of their four jobs really installs amplint from the action's folder into a fresh venv, building
the wheel as a user's job does (`--no-deps` through the action's `pip-args` input: the venv
sees this interpreter's packages for the dependencies)."""
import json
import os
import re
import site
import subprocess
import sys
import sysconfig

import pytest
import yaml

from test_output import _validator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ERROR = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"
INFO = ("import torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass A(nn.Module):\n"
        "    def forward(self, q):\n        return F.softmax(q, dim=-1)\n")


def _action():
    with open(os.path.join(ROOT, "action.yml")) as fh:
        return yaml.safe_load(fh)


def _expand(value: str, inputs: dict, outputs: dict) -> str:
    def one(m):
        expr = m.group(1).strip()
        if expr == "github.action_path":
            return ROOT
        if expr.startswith("inputs."):
            return inputs[expr[len("inputs."):]]
        if expr.startswith("steps."):
            _, step, _, name = expr.split(".")
            return outputs.get(step, {}).get(name, "")
        raise AssertionError(f"unexpected expression {expr}")
    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


def _condition(step, inputs, outputs) -> bool:
    cond = step.get("if")
    if cond is None:
        return True
    cond = _expand(cond.strip().removeprefix("${{").removesuffix("}}"), inputs, outputs)
    cond = cond.replace("always() && ", "")
    for name, value in inputs.items():
        cond = cond.replace(f"inputs.{name}", repr(value))
    return eval(re.sub(r"steps\.\w+\.outputs\.[\w-]+", lambda m: repr(_expand("${{ " + m.group(0) + " }}", inputs, outputs)), cond)
                .replace("&&", "and"))


def run_action(repo, tmp_path, python_bin, **given):
    """Run action.yml's steps in ``repo``; (exit status of the job, step logs, outputs)."""
    action = _action()
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(given)
    outputs, logs = {}, {}
    for step in action["runs"]["steps"]:
        if not _condition(step, inputs, outputs):
            continue
        if "uses" in step:
            assert step["uses"].startswith("github/codeql-action/upload-sarif@")
            sarif = _expand(step["with"]["sarif_file"], inputs, outputs)
            doc = json.load(open(sarif, encoding="utf-8"))
            assert not list(_validator().iter_errors(doc)), "the upload would be rejected"
            logs["upload"] = doc
            continue
        assert step["shell"] == "bash" and "${{" not in step["run"]  # inputs reach scripts through env only
        output_file = tmp_path / f"output-{step.get('id', 'x')}"
        output_file.write_text("")
        env = {**os.environ, "PATH": python_bin + os.pathsep + os.environ["PATH"], "GITHUB_OUTPUT": str(output_file),
               "RUNNER_TEMP": str(tmp_path), "HOME": str(tmp_path)}
        env.update({k: _expand(v, inputs, outputs) for k, v in step.get("env", {}).items()})
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
        logs[step["name"]] = proc
        if "id" in step:
            outputs[step["id"]] = dict(line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line)
        if proc.returncode != 0:
            return proc.returncode, logs, outputs
    return 0, logs, outputs


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory):
    """A venv without amplint whose packages (libcst, rich...) are this interpreter's."""
    venv = tmp_path_factory.mktemp("venv")
    # without its own pip and setuptools: this interpreter's (setuptools>=77, which the build needs) are used
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if os.path.isdir(p)]
    with open(os.path.join(purelib, "dependencies.pth"), "w") as fh:
        fh.write("\n".join(dict.fromkeys(ours)) + "\n")  # plain paths: their own .pth (our editable amplint) are not run
    gone = subprocess.run([str(venv / "bin" / "python"), "-c", "import amplint"], capture_output=True, text=True, cwd=venv)
    assert gone.returncode != 0, "the fresh venv must not see amplint before the action installs it"
    return str(venv / "bin")


def test_action_installs_lints_uploads_and_annotates(tmp_path, fresh_python):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "attention.py").write_text(ERROR)
    status, logs, outputs = run_action(repo, tmp_path, fresh_python, paths="src",
                                       **{"pip-args": "--no-deps"})
    install = logs["Install amplint"]
    assert install.returncode == 0, install.stderr
    assert status == 1  # the job fails on the error finding
    annotations = logs["Annotate the pull request"].stdout
    assert annotations.startswith("::error file=src/attention.py,line=5,col=37,")
    doc = logs["upload"]
    results = doc["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["AMP101"]
    assert results[0]["partialFingerprints"]["primaryLocationLineHash"]
    assert outputs["sarif"]["sarif-file"] == str(tmp_path / "amplint.sarif")
    assert outputs["annotate"]["exit-code"] == "1"

    # info findings only: annotated as notices, the job passes unless fail-on says info
    (repo / "src" / "attention.py").write_text(INFO)
    status, logs, outputs = run_action(repo, tmp_path, fresh_python, paths="src",
                                       **{"pip-args": "--no-deps"})
    assert status == 0 and logs["Annotate the pull request"].stdout.startswith("::notice file=src/attention.py,")
    status, logs, _ = run_action(repo, tmp_path, fresh_python, paths="src", **{"fail-on": "info", "upload-sarif": "false",
                                                                            "pip-args": "--no-deps"})
    assert status == 1 and "upload" not in logs


def test_gitlab_template_runs_as_a_job(tmp_path, fresh_python):
    """ci/amplint.gitlab-ci.yml: the job `amplint` (extending `.amplint`), its script lines
    run one after another with `sh -e` as a GitLab runner's shell does, its variables set."""
    with open(os.path.join(ROOT, "ci", "amplint.gitlab-ci.yml")) as fh:
        template = yaml.safe_load(fh)
    job = {**template[template["amplint"]["extends"]], **template["amplint"]}
    assert job["artifacts"]["reports"]["codequality"] == "gl-code-quality.json"
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "attention.py").write_text(ERROR)
    (repo / "src" / "broken.py").write_text("def f(:\n")

    def job_run(**variables):
        env = {**os.environ, "PATH": fresh_python + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
               **{k: str(v) for k, v in job["variables"].items()}, **variables}
        script = "\n".join(job["script"])
        return subprocess.run(["sh", "-e", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    missing = job_run()
    assert missing.returncode == 2 and "set AMPLINT_INSTALL" in missing.stdout
    proc = job_run(AMPLINT_INSTALL=f"--no-deps {ROOT}", AMPLINT_PATHS="src")
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the syntax error
    issues = json.loads((repo / "gl-code-quality.json").read_text())
    assert sorted(i["check_name"] for i in issues) == ["AMP101", "invalid-syntax"]
    assert "src/attention.py:5:37: AMP101" in proc.stdout and "src/broken.py:1:" in proc.stderr
