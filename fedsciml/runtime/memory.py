"""How much memory there is to use now (one reader for the driver's memory check, checkpoint and table loading).

The reader lives in :mod:`fedsciml.core.forms`, whose device-aware form choice reads the same figure (the core
layer cannot import the runtime); this module is the runtime's name for it."""
from __future__ import annotations

from fedsciml.core.forms import available_memory

__all__ = ["available_memory"]
