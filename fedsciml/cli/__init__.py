"""The command line: ``python -m fedsciml {list,solve,predict,ridge,bench,flower}`` (:mod:`fedsciml.cli.main`)."""
from __future__ import annotations

from fedsciml.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
