"""Where the pinned upstream sources live: ``bench/realcode/.cache/src/<name>==<version>/``,
unpacked by ``bench/realcode/fetch.py`` (``bench/verify_real.py --fetch`` runs it).  Nothing
third-party is committed; the harnesses import the unmodified upstream files from there.

The folder is put first on ``sys.path`` (verify's isolated import takes it off again), so
the package's own absolute imports (``from linformer.reversible import ...``) resolve to
the pinned copy, and verify lints and traces those files as the model's sources."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: bench/verify_real/.src: the suite's own copy (bench/verify_real.py makes it when the shared
#: cache is reached through a link: verify --fix mirrors files by their real path, and a fixed
#: copy of this file must find the fixed sources relative to itself)
LOCAL = os.path.join(os.path.dirname(HERE), ".src")
SRC = os.environ.get("AMPLINT_REAL_SRC") or (LOCAL if os.path.isdir(LOCAL) else os.path.join(
    os.path.dirname(os.path.dirname(HERE)), "realcode", ".cache", "src"))


def use(dist: str) -> str:
    """Put the unpacked ``dist`` (``name==version``) on sys.path; its folder."""
    root = os.path.join(SRC, dist)
    if not os.path.isdir(root):
        raise RuntimeError(f"{dist} is not unpacked under {SRC}: run python bench/verify_real.py --fetch")
    if root not in sys.path:
        sys.path.insert(0, root)
    return root
