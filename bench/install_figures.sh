#!/usr/bin/env bash
# Install figures for the README's install section (issue 25): fresh venvs in $OUT
# (default /tmp/amplint-install), GNU time for wall and CPU, du for sizes.
#   bash bench/install_figures.sh [REPO]      (REPO: a checkout of amplint, default: this one)
set -uo pipefail
REPO="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
OUT="${OUT:-/tmp/amplint-install}"
rm -rf "$OUT" && mkdir -p "$OUT" && cd "$OUT"
fresh() { python3 -m venv "$1" && "$1/bin/pip" -q install -U pip >/dev/null 2>&1; echo "$1 empty: $(du -sh "$1" | cut -f1)"; }
timed() { local label="$1"; shift; /usr/bin/time -f "$label: wall %e s, user %U s, sys %S s" "$@" 2>&1 | grep -v '^WARNING' | tail -2; }
fresh v_light
timed "pip install REPO (light)" v_light/bin/pip -q install "$REPO"
echo "v_light: $(du -sh v_light | cut -f1)"
timed "pip wheel --no-deps REPO" v_light/bin/pip -q wheel --no-deps -w wheel "$REPO"
ls -l wheel
fresh v_whl
timed "pip install the wheel" v_whl/bin/pip -q install wheel/amplint-*.whl
echo "v_whl: $(du -sh v_whl | cut -f1)"
mkdir -p w && printf 'import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n' > w/m.py
(cd w && ../v_whl/bin/amplint check --no-cache --format concise m.py; echo "check from the wheel: exit $?")
v_whl/bin/python -c "import torch" 2>&1 | tail -1
fresh v_np
timed "pip install numpy" v_np/bin/pip install numpy
echo "v_np: $(du -sh v_np | cut -f1)"
