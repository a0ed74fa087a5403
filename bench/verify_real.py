"""The real-model suite for ``amplint verify``: unmodified upstream models from PyPI, each run
through ``amplint verify PATH::FACTORY --format json``, and every verdict compared with the
hand-written one of ``bench/verify_real/expected.json`` (written from the plain PyTorch runs
of ``bench/verify_real_truth.py``; its ``why`` says what those runs showed).

Compared per model: each static finding's status (confirmed / not reproduced / not executed
/ fixed ...), each level's outcome (ok / crash at FILE:LINE / inf/NaN / N of M steps skipped),
and the runtime problems no rule predicted.  A finding verify reports that ``expected.json``
does not list (or the reverse) counts as a disagreement too.

    python bench/verify_real.py --fetch                # unpack the pinned sources (pip download, no install)
    python bench/verify_real.py --make-venv bench/.venv-real   # throwaway venv: amplint + einops + entmax, no torchvision
    python bench/verify_real.py                        # all models, CPU
    python bench/verify_real.py --model vit_classifier --device cuda --json out.json
    python bench/verify_real.py --fix                  # verify --fix: are the fixes proven where plain runs say so
    python bench/verify_real.py --reports bench/out/vr # keep the reports; a second run re-judges them without running

The models import einops (and x-transformers 0.3.0 entmax); ``--make-venv`` installs them
with ``--no-deps`` so that no second torch or torchvision is pulled in.  Exit status: 0 when
every verdict agrees, 1 otherwise, 2 when a model could not be run at all.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUITE = os.path.join(HERE, "verify_real")
DEFAULT_SRC = os.path.join(HERE, "realcode", ".cache", "src")
#: the suite's own copy of the pinned sources (ignored), read by the harnesses when present
LOCAL_SRC = os.path.join(SUITE, ".src")
#: pure-Python packages the upstream models import, installed with --no-deps
MODEL_DEPS = ("einops==0.8.2", "entmax==1.3")


def load_expected(path: str = os.path.join(SUITE, "expected.json")) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["models"]


def fetch(models: list[dict]) -> int:
    dists = sorted({m["dist"] for m in models})
    cmd = [sys.executable, os.path.join(HERE, "realcode", "fetch.py")]
    for d in dists:
        cmd += ["--only", d]
    return subprocess.call(cmd)


def local_copy(models: list[dict], src: str) -> None:
    """Copy the models' dists into ``bench/verify_real/.src`` when ``src`` is reached through a
    link (the shared cache): verify --fix mirrors the model's files by their real path, so the
    fixed copies of the harnesses would not find the fixed sources relative to themselves."""
    import shutil

    if os.path.realpath(src) == os.path.abspath(src) and not os.path.isdir(LOCAL_SRC):
        return
    for dist in sorted({m["dist"] for m in models}):
        if not os.path.isdir(os.path.join(LOCAL_SRC, dist)) and os.path.isdir(os.path.join(src, dist)):
            shutil.copytree(os.path.join(src, dist), os.path.join(LOCAL_SRC, dist), symlinks=False)


def make_venv(folder: str) -> int:
    """A throwaway venv: amplint from this checkout (with the pinned constraints, which bring
    the CPU torch) and the models' pure-Python imports without their dependencies."""
    subprocess.check_call([sys.executable, "-m", "venv", folder])
    pip = [os.path.join(folder, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.check_call(pip + ["-c", os.path.join(ROOT, "constraints.txt"), "-e", ROOT + "[verify]"])
    subprocess.check_call(pip + ["--no-deps", *MODEL_DEPS])
    print(f"run: {os.path.join(folder, 'bin', 'python')} {os.path.relpath(__file__)}")
    return 0


def run_verify(model: dict, device: str, extra: list[str]) -> tuple[dict | None, float, str]:
    cmd = [sys.executable, "-m", "amplint", "verify", model["target"], "--format", "json", "--device", device,
           "--opt-level", "O1", "O2", *extra]
    env = dict(os.environ, NO_COLOR="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        return None, seconds, (proc.stderr or proc.stdout).strip()[-2000:]
    return json.loads(proc.stdout)["results"][0], seconds, ""


def level_outcome(run: dict, dist_root: str) -> str:
    """verify's run of one level in expected.json's words."""
    crash = run.get("crash")
    if crash:
        where = os.path.relpath(crash["file"], dist_root) if crash.get("file") else "?"
        return f"crash at {where}:{crash['line']}"
    if run.get("origin") or run.get("first_nonfinite_site") or run.get("first_nonfinite_module") or run.get("nonfinite_loss"):
        return "inf/NaN"
    scales, skipped = run.get("loss_scales") or [], run.get("skipped_steps", 0)
    if scales and run.get("last_step_skipped"):
        # still skipping after verify's warm-up steps (the truth script steps on the same way):
        # no loss scale makes the gradients fit; skips followed by applied steps are the warm-up
        return f"{skipped} of {len(scales)} steps skipped"
    return "ok"


def compare(model: dict, report: dict, src: str, fix: bool = False) -> dict:
    """Agreement of one verify report with expected.json (``fix``: a ``verify --fix`` report,
    judged by ``expected_fix`` and ``level_outcomes_after`` where expected.json has them)."""
    dist_root = os.path.realpath(os.path.join(src, model["dist"]))
    rows = []
    got = {}
    for f in report["findings"]:
        path = os.path.realpath(f["path"])
        rel = os.path.relpath(path, dist_root) if path.startswith(dist_root + os.sep) else f["path"]
        got.setdefault((rel, f["line"], f["code"]), f)
    for want in model["findings"]:
        key = (want["file"], want["line"], want["code"])
        f = got.pop(key, None)
        status = f["status"] if f else "(not reported)"
        wanted = want.get("expected_fix", want["expected"]) if fix else want["expected"]
        rows.append({"finding": f"{want['code']} {want['file']}:{want['line']}", "expected": wanted,
                     "verify": status, "agree": status == wanted,
                     "evidence": [e["detail"] for e in (f or {}).get("evidence", [])],
                     "why": want.get("why", "")})
    for (rel, line, code), f in got.items():
        rows.append({"finding": f"{code} {rel}:{line}", "expected": "(not listed)", "verify": f["status"], "agree": False,
                     "evidence": [e["detail"] for e in f.get("evidence", [])], "why": ""})
    levels = []
    runs = report["after"] if fix and report.get("after") else report["before"]
    wanted_levels = (model.get("level_outcomes_after") if fix else None) or model["level_outcomes"]
    for level, want in wanted_levels.items():
        run = runs.get(level)
        text = level_outcome(run, dist_root) if run else "(not run)"
        levels.append({"level": level, "expected": want, "verify": text, "agree": text == want})
    unpredicted = [f"{p['level']} {p['kind']}" + (f" at {os.path.relpath(p['file'], dist_root)}:{p['line']}" if p.get("file") else "")
                   for p in report.get("runtime_only", [])]
    want_unpredicted = model.get("unpredicted", [])
    return {"name": model["name"], "findings": rows, "levels": levels,
            "unpredicted": {"expected": want_unpredicted, "verify": unpredicted,
                            "agree": sorted(unpredicted) == sorted(want_unpredicted)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetch", action="store_true", help="unpack the pinned upstream sources and stop")
    ap.add_argument("--make-venv", metavar="DIR", help="create a throwaway venv for the suite and stop")
    ap.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--src", default=os.environ.get("AMPLINT_REAL_SRC") or DEFAULT_SRC,
                    help="where the pinned sources are unpacked")
    ap.add_argument("--json", help="write the comparison here")
    ap.add_argument("--expected", default=os.path.join(SUITE, "expected.json"), help="the suite's expected verdicts")
    ap.add_argument("--fix", action="store_true", help="run verify --fix and judge the fixes (expected_fix, level_outcomes_after)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every finding, not only disagreements")
    ap.add_argument("--reports", metavar="DIR", help="keep each verify report in DIR (NAME.json, NAME.fix.json) and "
                    "judge a report already there instead of running verify again (after an expected.json change)")
    args = ap.parse_args(argv)
    models = [m for m in load_expected(args.expected) if not args.model or m["name"] in args.model]
    if args.make_venv:
        return make_venv(args.make_venv)
    if args.fetch:
        return fetch(models)
    if os.path.realpath(args.src) != os.path.realpath(DEFAULT_SRC):
        # an absolute location: verify --fix's temporary copies of the harnesses would import
        # the original sources from it (verify warns); the default is found relative to them
        os.environ["AMPLINT_REAL_SRC"] = args.src
    else:
        local_copy(models, args.src)
        if os.path.isdir(LOCAL_SRC):
            args.src = LOCAL_SRC
    print(f"# amplint verify on {len(models)} real models, device {args.device}, {platform.node()}, "
          f"python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results, broken = [], 0
    totals = {"findings": [0, 0], "levels": [0, 0], "unpredicted": [0, 0]}
    for model in models:
        saved = os.path.join(args.reports, model["name"] + (".fix" if args.fix else "") + ".json") if args.reports else None
        if saved and os.path.exists(saved):
            with open(saved, encoding="utf-8") as fh:
                report, seconds, error = json.load(fh), 0.0, ""
        else:
            report, seconds, error = run_verify(model, args.device, ["--fix"] if args.fix else [])
            if saved and report is not None:
                os.makedirs(args.reports, exist_ok=True)
                with open(saved, "w", encoding="utf-8") as fh:
                    json.dump(report, fh)
        if report is None:
            broken += 1
            print(f"{model['name']}: verify failed: {error}")
            continue
        res = compare(model, report, args.src, args.fix)
        res["seconds"] = round(seconds, 1)
        results.append(res)
        n_f = sum(r["agree"] for r in res["findings"])
        n_l = sum(r["agree"] for r in res["levels"])
        totals["findings"][0] += n_f
        totals["findings"][1] += len(res["findings"])
        totals["levels"][0] += n_l
        totals["levels"][1] += len(res["levels"])
        totals["unpredicted"][0] += res["unpredicted"]["agree"]
        totals["unpredicted"][1] += 1
        print(f"{model['name']:20} {model['dist']:28} findings {n_f}/{len(res['findings'])} levels {n_l}/{len(res['levels'])} "
              f"unpredicted {'agree' if res['unpredicted']['agree'] else 'DIFFER'}  {seconds:.1f}s")
        for r in res["findings"]:
            if args.verbose or not r["agree"]:
                mark = "  " if r["agree"] else "!!"
                print(f"   {mark} {r['finding']}: verify {r['verify']!r}, expected {r['expected']!r}")
        for r in res["levels"]:
            if args.verbose or not r["agree"]:
                print(f"   {'  ' if r['agree'] else '!!'} {r['level']}: verify {r['verify']!r}, expected {r['expected']!r}")
        if not res["unpredicted"]["agree"] or args.verbose:
            print(f"   {'  ' if res['unpredicted']['agree'] else '!!'} unpredicted: verify {res['unpredicted']['verify']}, "
                  f"expected {res['unpredicted']['expected']}")
    print("agreement: " + ", ".join(f"{k} {a}/{n}" for k, (a, n) in totals.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"device": args.device, "results": results, "totals": totals}, fh, indent=1)
    if broken:
        return 2
    return 0 if all(a == n for a, n in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
