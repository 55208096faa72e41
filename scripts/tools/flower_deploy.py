"""Kept for old command lines: ``python scripts/tools/flower_deploy.py ARGS`` is ``python -m fedsciml flower deploy
ARGS`` (a stock SuperLink and K stock SuperNodes on 127.0.0.1, one fedsciml run over them, everything stopped;
progress on stderr).  Use the entry point: it is what an installed fedsciml has.

    python -m fedsciml flower deploy bratu --clients 2 --method gn --rounds 5
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from fedsciml.cli import main

    sys.exit(main(["flower", "deploy", *sys.argv[1:]]))
