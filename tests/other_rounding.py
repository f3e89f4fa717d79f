"""The second configuration's kernel paths: an older processor than this one, as a real machine of that
kind runs it. ``make test-other-rounding`` (CI runs it beside ``make test``) takes its settings from
``python tests/other_rounding.py``, which prints them as ``NAME=value`` words for the command line.

Three libraries choose kernels by processor: ATen (``ATEN_CPU_CAPABILITY``: its own softmax, log-softmax,
sums, attention, small matmuls), oneDNN (``ONEDNN_MAX_CPU_ISA``: bf16 matmuls, and whether attention packs
for AMX) and MKL (``MKL_ENABLE_INSTRUCTIONS``: fp32 matmuls). Lowering only ATen's, as this configuration
once did (``ATEN_CPU_CAPABILITY=default``), builds a machine that does not exist, and torch refuses it
where the libraries meet: ``cpublas::could_pack(bf16)`` is true when oneDNN's effective ISA is at least
``avx512_core_amx``, and the flash-attention kernel then calls ``pack_vnni2``, which torch compiles only
under ``CPU_CAPABILITY_AVX512`` (elsewhere it raises "pack_vnni2 is only supported when avx512 is
supported": bf16 sdpa on an Intel Xeon with AMX). Capping all three together gives a machine that exists.

Which machine: the one whose rounding differs most from this one's. ``benchmarks/kernel_paths.py`` on a
2-core AMD EPYC (AVX-512) measured, bit for bit against the native run: an AVX2 machine (ATen ``avx2``,
oneDNN and MKL at AVX2) changes softmax, log-softmax and bf16 matmuls; a machine before AVX2 (ATen's
``default`` kernels, oneDNN at SSE4.1, MKL at SSE4.2) changes those and fp32 matmuls, sums, exp-sums and
bf16 causal attention too. So every x86 processor with AVX2 or more (AMD EPYC, Intel Xeon with or without
AMX, an AVX2 desktop) gets the machine before AVX2; a processor without AVX2 (already on ATen's default
kernels) and other architectures get ATen's ``default`` alone, which is where they are anyway.

One place still sees the real processor: torch asks cpuinfo directly whether to hand bf16 matmuls to
oneDNN (AVX-512BW present), and oneDNN, capped, runs them on its generic kernels, which any machine has.
"""

from __future__ import annotations

import sys

# ATen's name, oneDNN's, MKL's -- one machine each.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
PRE_AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
ATEN_DEFAULT = {"ATEN_CPU_CAPABILITY": "default"}


def cpu_flags(cpuinfo: str) -> set[str]:
    """The first processor's flags from ``/proc/cpuinfo`` text (x86: ``flags``; empty elsewhere)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def settings(flags: set[str]) -> dict[str, str]:
    """The environment of the second configuration on a processor with these flags."""
    if "avx2" in flags:
        return dict(PRE_AVX2_MACHINE)
    return dict(ATEN_DEFAULT)


def this_machine() -> dict[str, str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return settings(cpu_flags(f.read()))
    except OSError:
        return dict(ATEN_DEFAULT)


if __name__ == "__main__":
    sys.stdout.write(" ".join(f"{k}={v}" for k, v in this_machine().items()) + "\n")
