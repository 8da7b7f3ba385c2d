#!/usr/bin/env bash
# Before releasing new constraints: does the book pass with the newest release of every dependency?
#
#   bash tools/check_newest.sh            # check only: a fresh venv, newest releases, rlbook run + pytest
#   bash tools/check_newest.sh --write    # ... and, only if both pass, rewrite constraints.txt from that venv
#
# The venv gets no constraints (pip picks the newest release of every package the book and its `test`
# and `trl` extras need); torch is the one exception: pass TORCH_SPEC (default: the version
# constraints.txt pins) to try another, since torch comes from its own index on CPU-only machines.
# It then runs the book as a reader does (`rlbook run`, every chapter, the claims and asserts as the
# check) and the whole suite (`pytest`, the chapters under nbval included). Takes about as long as CI.
set -euo pipefail
cd "$(dirname "$0")/.."
write=0
[[ "${1:-}" == "--write" ]] && write=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
source "$work/venv/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1 MPLBACKEND=Agg
torch_spec=${TORCH_SPEC:-$(grep -E '^torch==' constraints.txt)}
pip install -q "$torch_spec"
pip install -q --upgrade -e ".[test,trl]"
echo "newest releases installed:"
python - <<'EOF'
from importlib import metadata
for name in ["torch", "numpy", "scipy", "matplotlib", "transformers", "gymnasium", "nbval", "trl"]:
    print(f"  {name} {metadata.version(name)}")
EOF
status=0
RLBOOK_RUNS_DIR="$work/runs" rlbook run --out "$work/runs/small" || status=1
pytest || status=1
if [[ $status -ne 0 ]]; then
    echo "FAILED with the newest releases: constraints.txt left as it is" >&2
    exit 1
fi
echo "the book passes with the newest releases"
if [[ $write -eq 1 ]]; then
    python tools/constraints.py write
    git --no-pager diff --stat constraints.txt
fi
