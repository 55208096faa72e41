"""Shared test configuration: the ``gpu`` marker (registered in pyproject.toml) skips where CUDA is absent.

``FEDSCIML_GPU_TEST_DEVICE=cpu`` runs the ``gpu`` tests on the CPU instead (a dry run of their logic).

Under pytest-xdist (the README's ``pytest -q -n 2``: two workers) each worker and the processes its tests
start run one math thread unless ``OMP_NUM_THREADS`` says otherwise: workers each using every core's thread pool
slow one another; the tests pass at any thread count."""
import os

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported: its pool reads it; children inherit it

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() or os.environ.get("FEDSCIML_GPU_TEST_DEVICE", "cuda") == "cpu":
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
