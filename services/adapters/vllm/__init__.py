"""Polymorph inside vLLM: promoted kernels served live, vLLM's requests reported as traffic.

Entry points (pyproject.toml, installed with `pip install '.[vllm]'`):
- `vllm.general_plugins` → `register`: in every vLLM process, replaces RMSNorm, SiluAndMul and
  RotaryEmbedding with versions that call through the worker's op table (ops.py, table.py); the
  first one built in a process starts that worker's sidecar (sidecar.py), which follows promotions.
- `vllm.stat_logger_plugins` → stat_logger.TrafficStatLogger: in the API server, one RequestRecord per
  finished request on traffic.requests (traffic.py).
Settings: settings.py. Everything here is off the serving path's failure modes: no NATS, no key,
a bad kernel or a compiled model leave vLLM serving its own ops.
"""


def register() -> None:
    from services.adapters.vllm import ops

    ops.register()
