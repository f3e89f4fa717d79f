"""Generation engines, one module each, registered under the ``engine`` kind (``rlvr list --kind engine``).

* ``loop`` (default): a KV-cache decode loop over the model's forward (CPU friendly);
* ``hf``: Hugging Face ``model.generate``;
* ``specroll``: exact speculative decoding with future-token heads;
* ``vllm``: vLLM colocated on the GPU (optional extra; imported only when it first generates), one
  engine shard per training rank with ``external_launcher`` (``vllm_colocate``);
* ``vllm_server``: a separately started vLLM server over HTTP, with weight sync (``vllm_worker`` is
  the server-side extension).

The contract is :mod:`rlvr.rollout.engines.base` (``Engine``, ``DecodeRequest``). Adding an engine is
one new module here (every module of this package is imported when the registry is first read) or
a class of your own named as ``rollout.engine: "pkg.module:MyEngine"``.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
