"""Shared test configuration: the ``gpu`` marker (registered in pyproject.toml) skips where CUDA is absent.

``FEDSCIML_GPU_TEST_DEVICE=cpu`` runs the ``gpu`` tests on the CPU instead (a dry run of their logic).

Under pytest-xdist (the README's ``pytest -q -n 3``: three workers) each worker and the processes its tests
start run one math thread unless ``OMP_NUM_THREADS`` says otherwise: workers each using every core's thread pool
slow one another; the tests pass at any thread count."""
import os
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported: its pool reads it; children inherit it

import pytest  # noqa: E402
import torch  # noqa: E402


#: the test files with a module-scoped fixture (a Flower simulation of many runs, a stock deployment, a fitted
#: estimator): found by reading the files, so a new one joins without a list kept by hand
SHARED_FIXTURE_FILES = frozenset(p.name for p in Path(__file__).parent.glob("test_*.py")
                                 if 'scope="module"' in p.read_text(encoding="utf-8"))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n N`` with xdist's default mode (``load``): each test is its own unit of work, as there, except
    that the tests of a file in :data:`SHARED_FIXTURE_FILES` are one unit, run on one worker — under ``load`` a
    module fixture is built on every worker that runs one of its tests (the minutes-long Flower fixtures twice).
    The largest units are handed out first (xdist's ``--loadscope-reorder``).  (``--dist loadgroup`` would do
    this with marks, but pytest-xdist 3.8 writes the group into ``item._nodeid``, which pytest 9 no longer
    reads.)  Another ``--dist`` is left as the user gives it."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if Path(path).name in SHARED_FIXTURE_FILES else nodeid

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    _slow_first(items)
    if torch.cuda.is_available() or os.environ.get("FEDSCIML_GPU_TEST_DEVICE", "cuda") == "cpu":
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _slow_first(items) -> None:
    """Under xdist, the tests marked ``slow`` (each half a minute or more: stock Flower processes, client processes,
    long solves) first in the collection, the others in their order.  The scheduler above hands out its units
    largest first and, among units of one test, in collection order: a slow test collected late can start when
    the rest is nearly done and run alone at the end while the other workers sit idle.  The files of :data:`SHARED_FIXTURE_FILES` keep
    their order (their tests are one unit).  A stable sort of the same collection: every worker sends the same
    order, as xdist requires."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def late(item) -> int:
        shared = item.path.name in SHARED_FIXTURE_FILES
        return 0 if "slow" in item.keywords and not shared else 1

    items.sort(key=late)
