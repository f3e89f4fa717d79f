"""The second configuration (``make test-other-rounding``) is a machine that exists: ATen's kernels and
oneDNN's ISA are capped at the same level, so torch never takes a path no processor takes (the old
``ATEN_CPU_CAPABILITY=default`` alone made bf16 attention raise on AMX CPUs); bf16 attention runs there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import other_rounding

# The ISA oneDNN must run at (its verbose ``info,cpu,isa:`` line) beside each of ATen's capabilities below
# AVX-512: a processor with AVX2 kernels has no AVX-512 (so no AMX), one with the default kernels no AVX2.
ONEDNN_BESIDE_ATEN = {"AVX2": "Intel AVX2", "DEFAULT": "Intel SSE4.1"}

PROBE = r"""
import json, math, torch
out = {"aten": torch.backends.cpu.get_cpu_capability()}
# A oneDNN primitive (a reorder into its layout), so that its verbose output names the ISA it runs at.
torch.randn(1, 3, 8, 8).to_mkldnn()
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, 37, 32, generator=g).bfloat16() for _ in range(3))
got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
out["sdpa_err"] = (got - ref).abs().max().item()
out["v_max"] = v.float().abs().max().item()
a, b = torch.randn(33, 64, generator=g).bfloat16(), torch.randn(64, 17, generator=g).bfloat16()
out["mm_err"] = ((a @ b).float() - a.float() @ b.float()).abs().max().item()
out["mm_scale"] = (a.float().abs() @ b.float().abs()).max().item()
print(json.dumps(out))
"""


@pytest.mark.parametrize("flags, want", [
    ({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, other_rounding.PRE_AVX2_MACHINE),  # Xeon, AMX
    ({"avx2", "avx512f", "avx512_bf16"}, other_rounding.PRE_AVX2_MACHINE),  # EPYC Zen 4
    ({"avx", "avx2", "fma"}, other_rounding.PRE_AVX2_MACHINE),  # EPYC Milan, a Skylake desktop
    ({"avx", "sse4_2"}, other_rounding.ATEN_DEFAULT),  # already on ATen's default kernels
    (set(), other_rounding.ATEN_DEFAULT),  # aarch64: no x86 flags line
])
def test_every_library_steps_down_together(flags, want):
    got = other_rounding.settings(flags)
    assert got == want
    if "ONEDNN_MAX_CPU_ISA" in got:  # the three libraries name the same machine
        level = {"avx2": ("AVX2", "AVX2"), "default": ("SSE41", "SSE4_2")}[got["ATEN_CPU_CAPABILITY"]]
        assert (got["ONEDNN_MAX_CPU_ISA"], got["MKL_ENABLE_INSTRUCTIONS"]) == level


def test_cpu_flags_are_read_from_cpuinfo_text():
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f amx_bf16\nbugs\t: x\n"
    assert other_rounding.cpu_flags(text) == {"fpu", "avx2", "avx512f", "amx_bf16"}
    assert other_rounding.cpu_flags("Processor\t: AArch64\nFeatures\t: fp asimd\n") == set()


def test_this_machines_second_configuration_is_a_real_machine_and_runs_bf16_attention():
    env = other_rounding.this_machine()
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env, "ONEDNN_VERBOSE": "1", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    got = json.loads(lines[-1])
    assert got["aten"] == env["ATEN_CPU_CAPABILITY"].upper()  # ATen took the forced kernels
    isa = [ln.split("isa:", 1)[1] for ln in lines if ",info,cpu,isa:" in ln]
    if isa:  # x86: oneDNN runs at the same level as ATen (no AMX packing beside ATen's AVX2 kernels)
        assert isa == [ONEDNN_BESIDE_ATEN[got["aten"]]], (got["aten"], isa)
    # bf16 attention against fp32 on the same bf16 inputs: the probabilities are rounded to bf16 (relative
    # 2^-8) before they weight v and the output is rounded once more (2^-9), so |error| <= 2^-7 max|v|;
    # the bound allows twice that.
    assert got["sdpa_err"] <= 2.0 ** -6 * got["v_max"]
    # A bf16 matmul accumulates in fp32 and rounds its output once: |error| <= 2^-8 sum|a||b| (twice: 2^-7).
    assert got["mm_err"] <= 2.0 ** -7 * got["mm_scale"]
