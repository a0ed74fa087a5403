"""Do two amplint installations give byte-identical results?  A speed change must not
change any finding, fix or error: this runs ``amplint check --output-format json`` (and
``fix --diff --unsafe-fixes``) with this checkout's python and with ``--before PYTHON``
on the same folders, one process and a worker pool each, and compares the bytes.

    python bench/same_results.py --before /path/to/other/python fixtures /tmp/corpus [...]

Exit 0 when every output matches, 1 (with the first differing lines) otherwise.  Runs from
a temporary working folder, so no ``.amplint_cache`` is written into the checkout; the
cache is off in the ``--no-cache`` runs and on (a fresh folder, then warm) in the others,
so a cache that changed a result shows too.
"""
from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def outputs(python: str, folder: str, work: str) -> dict[str, bytes]:
    cache = os.path.join(work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    runs = {
        "check json -j 1": ["check", folder, "--output-format", "json", "--no-cache", "-j", "1"],
        "check json pool": ["check", folder, "--output-format", "json", "--no-cache", "-j", "2"],
        "check json cold cache": ["check", folder, "--output-format", "json", "--cache-dir", cache],
        "check json warm cache": ["check", folder, "--output-format", "json", "--cache-dir", cache],
        "check ALL O2 json": ["check", folder, "--output-format", "json", "--no-cache", "--select", "ALL",
                              "--opt-level", "O2", "--report-unused-suppressions"],
        "fix --diff --unsafe-fixes": ["fix", folder, "--diff", "--unsafe-fixes", "--no-cache"],
    }
    got = {}
    for name, args in runs.items():
        proc = subprocess.run([python, "-m", "amplint", *args], cwd=work, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got[name] = b"exit %d\n" % proc.returncode + proc.stdout + b"\n--- stderr\n" + proc.stderr
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, metavar="PYTHON", help="the python of the other amplint")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="amplint_same_")
    same = True
    try:
        for folder in args.folders:
            folder = os.path.abspath(folder)
            before, after = outputs(args.before, folder, work), outputs(sys.executable, folder, work)
            for name in after:
                if before[name] == after[name]:
                    print(f"same  {folder}: {name} ({len(after[name])} bytes)")
                    continue
                same = False
                print(f"DIFF  {folder}: {name}")
                diff = difflib.unified_diff(before[name].decode(errors="replace").splitlines(),
                                            after[name].decode(errors="replace").splitlines(),
                                            "before", "after", lineterm="", n=1)
                for i, line in enumerate(diff):
                    if i >= 40:
                        print("  ...")
                        break
                    print("  " + line)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
