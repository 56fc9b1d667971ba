"""The hardware name a kernel is promoted for: one string per device kind, the same in every process
that runs kernels (engines, and serving-side adapters deciding whether a promotion is theirs)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def hardware_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
