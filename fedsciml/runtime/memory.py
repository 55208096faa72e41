"""How much memory there is to use now (one reader for the driver's memory check, checkpoint and table loading)."""
from __future__ import annotations

import os

import torch


def available_memory(device: torch.device | None = None) -> int | None:
    """Bytes of memory available now: free GPU memory for a CUDA device, else the OS's MemAvailable
    (``None`` where it cannot be read)."""
    if device is not None and torch.device(device).type == "cuda":
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # no /proc (not Linux): the sysconf estimate below
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no such sysconf names here
        return None
