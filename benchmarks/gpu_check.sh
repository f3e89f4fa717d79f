#!/usr/bin/env bash
# A staged check of rlvr's GPU paths on a one-GPU machine (torch and transformers installed, nothing
# installable, nothing downloaded): builds a random ≈0.5 B model, then runs each stage (DDP, FSDP2 and
# ZeRO-2 jobs of one NCCL process, bf16 + LoRA packed-against-padded exactness, async k = 1, a plain
# bf16 step) in its own process under its own time limit, and prints one JSON line per stage on stdout
# as it ends (benchmarks/gpu_check.py says what each measures; everything else goes to stderr). The
# exit status is 0 only when every stage says ok. Pure-Python packages the machine lacks (trl, peft,
# accelerate, datasets, ...) are carried as wheels or unpacked folders in $RLVR_WHEELS (default:
# wheels/ at the repository root) and put on PYTHONPATH here; a wheel of pure Python imports from its
# zip as it is.
#
#   bash benchmarks/gpu_check.sh               # on the GPU machine: under 12 minutes (stage limits)
#   bash benchmarks/gpu_check.sh --cpu-smoke   # every stage on CPU/gloo with a tiny model (minutes)
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
