#!/usr/bin/env bash
# The book on a CUDA GPU, in one go, on a machine with a CUDA torch and no internet.
#
#   bash tools/gpu_check.sh [OUT_DIR]          # default OUT_DIR: $OUT, else gpu_check_out/
#
# What it runs, in parallel where the jobs are independent, each with its own time limit (LIMIT, default
# 420 s), and then one summary table (also in OUT_DIR/summary.txt):
#   * every chapter at the default size on the GPU (RLBOOK_DEVICE=cuda), in six groups with their own runs
#     folders (chapter 9 after 8 and 11 after 10, which start from their checkpoints); the claims and
#     asserts are the check there (the stored outputs are CPU outputs, so nbval does not apply). By default
#     through tools/check_claims.py, which runs each chapter to its end and lists every claim or assert
#     that fails; RUNNER=rlbook runs them as a reader does (`rlbook run`, which stops a chapter at its
#     first failure);
#   * chapters 8-11 at `--size full` on the GPU;
#   * the same chapters at the default size on this machine's CPU (RLBOOK_DEVICE=cpu, 2 threads each): a
#     second CPU model, another float order, so a claim that only held on the CPU the outputs were made on
#     fails here;
#   * the fast suite on the GPU (`pytest --device cuda -m "not slow"`, no browser tests);
#   * the GRPO step time of the book's loop on the GPU at both sizes (benchmarks/grpo_step_gpu.py).
#
# Missing packages come from wheels downloaded beforehand into .whl/ (no internet needed there). On a
# machine with internet, in the project root, for Python 3.12 on x86-64 Linux (change --python-version
# to the GPU machine's):
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     --platform any -d .whl nbclient nbformat ipykernel ipywidgets gymnasium farama-notifications \
#     jupyter_client jupyter_core traitlets pyzmq tornado comm debugpy ipython matplotlib-inline nest_asyncio \
#     fastjsonschema jsonschema jsonschema-specifications referencing rpds-py platformdirs decorator jedi parso \
#     pexpect ptyprocess prompt_toolkit wcwidth stack_data asttokens executing pure_eval \
#     ipython_pygments_lexers widgetsnbextension jupyterlab_widgets hypothesis sortedcontainers attrs pytest-xdist
set -u
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
LIMIT=${LIMIT:-420}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg HYPOTHESIS_PROFILE=ci
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/rlbook-site .whl/*.whl \
        > "$out/wheels.log" 2>&1 || echo "wheel install failed (see wheels.log)"
    export PYTHONPATH=/tmp/rlbook-site:$PWD
else
    export PYTHONPATH=$PWD
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__, 'numpy', numpy.__version__)"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"; } > "$out/env.txt" 2>&1
runs=$(mktemp -d)
T0=$SECONDS
job() {  # job NAME COMMAND...: run in the background with the time limit, log to OUT/NAME.log, rc and wall at the end
    local name=$1; shift
    ( s=$SECONDS; timeout "$LIMIT" "$@" > "$out/$name.log" 2>&1; echo "rc=$? wall=$((SECONDS - s))" >> "$out/$name.log" ) &
}
chapters() {  # chapters DEVICE SIZE THREADS GROUP...: the chapters on DEVICE at SIZE, one job per group
    local device=$1 size=$2 threads=$3; shift 3
    for group in "$@"; do
        local tag=${device}_${size}_${group// /_}
        if [[ "${RUNNER:-claims}" == rlbook ]]; then
            job "$tag" env RLBOOK_DEVICE="$device" OMP_NUM_THREADS="$threads" RLBOOK_RUNS_DIR="$runs/$tag" \
                python3 -m rlbook.app.cli run $group --size "$size" --out "$runs/$tag/nb"
        else
            job "$tag" env RLBOOK_DEVICE="$device" OMP_NUM_THREADS="$threads" RLBOOK_RUNS_DIR="$runs/$tag" \
                RLBOOK_SIZE="$size" python3 tools/check_claims.py $group
        fi
    done
}
chapters cuda small 2 "01 02 03 04" "05 06 07" "08 09" "10 11" "12 13" "14 15"
chapters cuda full 2 "08 09" "10 11"
chapters cpu small 2 "01 02 03 04" "05 06 07" "08 09" "10 11" "12 13" "14 15"
job suite env RLBOOK_DEVICE=cuda python3 -m pytest -q -o addopts="" -p no:cacheprovider --device cuda -m "not slow" \
    -n 3 -rf tests --ignore=tests/browser
job step_time env RLBOOK_DEVICE=cuda python3 benchmarks/grpo_step_gpu.py
wait
python3 - "$out" "$((SECONDS - T0))" <<'EOF' | tee "$out/summary.txt"
import re, sys
from pathlib import Path
out, total = Path(sys.argv[1]), sys.argv[2]
print((out / "env.txt").read_text().strip())
print(f"\n{'job':<28}{'rc':>4}{'wall s':>8}  result")
for log in sorted(out.glob("*.log")):
    if log.name == "wheels.log":
        continue
    text = log.read_text(errors="replace")
    tail = re.findall(r"rc=(-?\d+) wall=(\d+)", text)
    rc, wall = tail[-1] if tail else ("?", "?")
    rows = re.findall(r"^(\d\d) +(ok|FAILED) +([\d.]+)", text, flags=re.M)  # rlbook run's table
    checked = re.findall(r"^(\d\d) +(\d+) +(\d+)$", text, flags=re.M)  # check_claims' table
    if rows:
        result = "  ".join(f"{c} {s} {float(t):.0f}s" for c, s, t in rows)
    elif checked:
        result = "  ".join(f"{c} {'ok' if n == '0' else n + ' failed'} {t}s" for c, n, t in checked)
    else:
        counts = re.findall(r"^=* ?(\d+ (?:passed|failed).*?) in [\d.]+s", text, flags=re.M)
        lines = [line for line in text.strip().splitlines() if not line.startswith("rc=")]
        result = counts[-1] if counts else (lines[-1][:90] if lines else "")
    print(f"{log.stem:<28}{rc:>4}{wall:>8}  {result}")
failed = [line.strip() for log in sorted(out.glob("*.log")) for line in log.read_text(errors="replace").splitlines()
          if line.startswith("    claim:") or line.startswith("    assert:") or line.startswith("    crash:")
          or "AssertionError: the text says" in line]
print(f"\ntotal wall {total} s; failures listed by the chapters: {len(failed)}")
for line in failed:
    print("  " + line[:240])
EOF
