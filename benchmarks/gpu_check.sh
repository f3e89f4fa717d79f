#!/usr/bin/env bash
# One prepared check of rlvr's GPU paths on a one-GPU machine (an H200 with torch and transformers
# installed and nothing installable); prints one JSON object on stdout (benchmarks/gpu_check.py says
# what it measures). Pure-Python packages the machine lacks (trl, peft, accelerate, datasets, ...) are
# carried as wheels or unpacked folders in $RLVR_WHEELS (default: wheels/ at the repository root) and
# put on PYTHONPATH here; a wheel of pure Python imports from its zip as it is.
#
#   bash benchmarks/gpu_check.sh               # on the GPU machine: ≈0.5 B model, < 5 minutes
#   bash benchmarks/gpu_check.sh --cpu-smoke   # the same code on CPU with a tiny model (< 1 minute)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels="${RLVR_WHEELS:-$root/wheels}"
extra="$root/src:$root"
if [ -d "$wheels" ]; then
  for w in "$wheels"/*; do
    case "$w" in
      *.whl|*/) extra="$extra:$w" ;;
      *) [ -d "$w" ] && extra="$extra:$w" ;;
    esac
  done
fi
export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
python="${PYTHON:-python}"
exec "$python" "$root/benchmarks/gpu_check.py" "$@"
