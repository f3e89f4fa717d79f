"""Which float results change with the CPU kernel path (what `make test-other-rounding` relies on).

Runs a few ops (fp32 and bf16 matrix products, softmax, log-softmax, a sum, exp-sum, bf16 causal
attention) in fresh interpreters under each setting and prints, as JSON, whether their bits equal the
native run's (an op that raises under a setting is listed under "raises"). "second configuration" is
what `make test-other-rounding` sets on this machine (tests/other_rounding.py):

    python benchmarks/kernel_paths.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import hashlib, torch
torch.manual_seed(0)
a, b, x = torch.randn(64, 300), torch.randn(300, 77), torch.randn(16, 1000)
q = torch.randn(2, 4, 37, 32).bfloat16()
ops = {"matmul": lambda: a @ b, "matmul_bf16": lambda: (a.bfloat16() @ b.bfloat16()).float(),
       "softmax": lambda: x.softmax(-1), "log_softmax": lambda: x.log_softmax(-1), "sum": lambda: x.sum(-1),
       "exp_sum": lambda: x.exp().sum(),
       "sdpa_bf16": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).float()}
print(torch.backends.cpu.get_cpu_capability())
for k, f in ops.items():
    try:
        print(k, hashlib.sha256(f().numpy().tobytes()).hexdigest())
    except RuntimeError:
        print(k, "raises")
"""

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.other_rounding import AVX2_MACHINE, PRE_AVX2_MACHINE, this_machine  # noqa: E402

SETTINGS = {"native": {}, "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
            "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
            "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"}, "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
            "an AVX2 machine": AVX2_MACHINE, "a machine before AVX2": PRE_AVX2_MACHINE,
            "second configuration": this_machine()}


def run(extra: dict[str, str]) -> tuple[str, dict[str, str]]:
    env = {**os.environ, **extra}
    lines = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    return lines[0], dict(line.split() for line in lines[1:] if line)


def main() -> None:
    native_cap, native = run({})
    report = {"native_capability": native_cap, "settings": {}}
    for name, extra in SETTINGS.items():
        cap, got = run(extra)
        report["settings"][name] = {"env": extra, "capability": cap,
                                    "changed": [k for k in native if got[k] != native[k] and got[k] != "raises"],
                                    "raises": [k for k in native if got[k] == "raises"]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
