"""Which float results change with the CPU kernel path (what `make test-other-rounding` relies on).

Runs a few ops (a matrix product, softmax, log-softmax, a sum, exp-sum) in fresh interpreters under
each setting and prints, as JSON, whether their bits equal the native run's:

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
out = {"matmul": a @ b, "softmax": x.softmax(-1), "log_softmax": x.log_softmax(-1), "sum": x.sum(-1),
       "exp_sum": x.exp().sum()}
print(torch.backends.cpu.get_cpu_capability())
for k, v in out.items():
    print(k, hashlib.sha256(v.numpy().tobytes()).hexdigest())
"""

SETTINGS = {"native": {}, "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
            "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
            "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"}, "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


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
        report["settings"][name] = {"capability": cap, "changed": [k for k in native if got[k] != native[k]]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
