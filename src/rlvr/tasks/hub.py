"""``datasets.load_dataset`` names (e.g. ``openai/gsm8k``) for the dataset task, from the local
Hugging Face cache only: rlvr never downloads (like ``load_model``), so a name loads where it was
loaded once before with the same cache (``HF_HOME`` / ``HF_DATASETS_CACHE``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


def looks_like_hub_name(path: str) -> bool:
    """``name`` or ``namespace/name`` with no file suffix and not an absolute or relative path."""
    return (bool(path) and path.count("/") <= 1 and not path.startswith((".", "/", "~"))
            and Path(path).suffix not in FILE_SUFFIXES)


def read_hub(path: str, name: str = "") -> dict[str, list[dict[str, Any]]]:
    """Rows per split of cached dataset ``path`` (configuration ``name``), in offline mode."""
    from unittest import mock

    import datasets

    where = f"'{path}'" + (f" (configuration '{name}')" if name else "")
    try:
        with mock.patch.object(datasets.config, "HF_HUB_OFFLINE", True):  # cache only, no network
            data = datasets.load_dataset(path, name or None)
    except (ConnectionError, FileNotFoundError, ValueError) as err:
        raise FileNotFoundError(
            f"dataset {where} is not a local file or folder and not in the Hugging Face datasets cache "
            f"({datasets.config.HF_DATASETS_CACHE}); rlvr does not download: load it once with "
            f"datasets.load_dataset where there is network (same HF_HOME), or give a .jsonl / .parquet / "
            f"save_to_disk path. ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    if isinstance(data, datasets.DatasetDict):
        return {split: data[split].to_list() for split in data}
    return {"train": data.to_list()}
