"""What every subcommand shares: exit codes, the one-line error, the thread policy."""
from __future__ import annotations

import os
import sys

EXIT_USAGE = 2
EXIT_FAILED = 1


class CLIError(Exception):
    pass


THREADS_HELP = ("CPU threads for torch/BLAS (default: all cores, or 1 when the load average already exceeds the "
                "core count — oversubscribed BLAS threads spin and run several times slower)")


def set_threads(threads, quiet=False):
    """The one thread policy of every subcommand: ``threads`` if given, else all cores, or 1 when the load
    average already exceeds the core count (and OMP_NUM_THREADS is not set)."""
    import torch

    if threads is not None:
        if threads < 1:
            raise CLIError(f"--threads must be ≥ 1, got {threads}")
        torch.set_num_threads(threads)
        return
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:  # pragma: no cover - no load average on this platform
        return
    if cores > 1 and load >= cores and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
        if not quiet:
            print(f"[fedsciml] load average {load:.1f} ≥ {cores} cores: using 1 thread (--threads N to override)",
                  file=sys.stderr)
