"""Shared test configuration: the ``gpu`` marker (registered in pyproject.toml) skips where CUDA is absent.

``FEDSCIML_GPU_TEST_DEVICE=cpu`` runs the ``gpu`` tests on the CPU instead (a dry run of their logic)."""
import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() or os.environ.get("FEDSCIML_GPU_TEST_DEVICE", "cuda") == "cpu":
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
