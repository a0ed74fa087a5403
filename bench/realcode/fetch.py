"""Download and unpack the pinned distributions the real-code benchmark reads.

Every ``corpus/*.jsonl`` line names a distribution (``"dist": "name==version"``) and a
path inside it.  For each distinct pin this script runs

    pip download --no-deps --no-binary :none: name==version

(pip prefers a wheel and falls back to the sdist), unpacks the archive into
``bench/realcode/.cache/src/<name>==<version>/`` and checks that every listed path
exists.  An sdist's single top-level folder (``fairseq-0.9.0/``) is stripped, so a path
reads the same whether it came from a wheel or an sdist.  The cache is git-ignored:
no third-party code is ever committed.  Already unpacked pins are skipped.

    python bench/realcode/fetch.py            # everything in corpus/*.jsonl
    python bench/realcode/fetch.py --only fairseq==0.9.0

Exit status: 0 when every listed path exists, 1 when some are missing (listed), 2 when a
download failed.  Missing pins are reported, the others still fetched.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache")
SRC = os.path.join(CACHE, "src")


def load_corpus(corpus_dir: str = os.path.join(HERE, "corpus")) -> list[dict]:
    entries = []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    entry = json.loads(line)
                    entry["_corpus"] = f"{os.path.basename(path)}:{n}"
                    entries.append(entry)
    return entries


def unpacked_dir(dist: str) -> str:
    return os.path.join(SRC, dist)


def source_path(entry: dict) -> str:
    return os.path.join(unpacked_dir(entry["dist"]), entry["path"])


def _strip_single_top(root: str) -> None:
    """An sdist unpacks to one ``name-version/`` folder: move its contents up."""
    items = os.listdir(root)
    if len(items) == 1 and os.path.isdir(os.path.join(root, items[0])):
        top = os.path.join(root, items[0])
        for name in os.listdir(top):
            shutil.move(os.path.join(top, name), os.path.join(root, name))
        os.rmdir(top)


def unpack(archive: str, dest: str) -> None:
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if archive.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        if archive.endswith(".zip"):
            _strip_single_top(tmp)
    elif archive.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(archive) as t:
            t.extractall(tmp, filter="data")
        _strip_single_top(tmp)
    else:
        raise ValueError(f"unknown archive type: {archive}")
    os.replace(tmp, dest)


def fetch(dist: str) -> str | None:
    """Download and unpack one pin; return an error message or None."""
    dest = unpacked_dir(dist)
    if os.path.isdir(dest):
        return None
    with tempfile.TemporaryDirectory(dir=CACHE) as dl:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:",
             "--disable-pip-version-check", "-q", "-d", dl, dist],
            capture_output=True, text=True)
        archives = os.listdir(dl)
        if proc.returncode != 0 or len(archives) != 1:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no archive"]
            return f"pip download {dist} failed: {tail[0]}"
        unpack(os.path.join(dl, archives[0]), dest)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="fetch only this pin (repeatable)")
    args = ap.parse_args(argv)
    os.makedirs(SRC, exist_ok=True)
    entries = load_corpus()
    dists = sorted({e["dist"] for e in entries if not args.only or e["dist"] in args.only})
    failed = []
    # pip spends most of its time waiting on the index: a few downloads at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        for dist, err in zip(dists, pool.map(fetch, dists)):
            print(f"{'FAILED' if err else 'ok':6} {dist}" + (f": {err}" if err else ""), flush=True)
            if err:
                failed.append(dist)
    missing = [e for e in entries if e["dist"] in dists and e["dist"] not in failed
               and not os.path.isfile(source_path(e))]
    for e in missing:
        print(f"missing: {e['id']}: {e['dist']} has no {e['path']} ({e['_corpus']})")
    n_ok = sum(1 for e in entries if e["dist"] in dists) - len(missing)
    print(f"{len(dists) - len(failed)}/{len(dists)} distributions, {n_ok} files present")
    if failed:
        return 2
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
