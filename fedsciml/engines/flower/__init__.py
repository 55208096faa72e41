"""Flower as a transport of fedsciml's runtime (optional: ``pip install ".[flower]"``).

fedsciml's one driver (:mod:`fedsciml.runtime.driver`), its strategies and round loop (:mod:`fedsciml.methods`,
:mod:`fedsciml.runtime.loop`) run the job; Flower only carries the plain-data requests and replies
(:class:`~fedsciml.runtime.transport.Request`,
:class:`~fedsciml.runtime.transport.Reply`) between a ``ServerApp`` and the
``ClientApp`` of each node, as Flower ``Message`` s:

* :mod:`fedsciml.engines.flower.codec` — a request or reply as a ``RecordDict``:
  tensors in an ``ArrayRecord`` (``numpy.save`` bytes, float64 stays
  float64, bitwise), config and metrics as one JSON string in a
  ``ConfigRecord``;
* :mod:`fedsciml.engines.flower.transport` — :class:`FlowerTransport`, a
  :class:`~fedsciml.runtime.transport.Transport` over a Flower ``Grid``:
  push the messages to the chosen nodes, pull the replies at a short
  interval until all arrived or the timeout passed (no fixed sleeps); a node
  that does not answer in time, or answers with an error, is a
  :class:`~fedsciml.runtime.transport.Failure` for that exchange, so the
  loop's dropout and rejection rules apply;
* :mod:`fedsciml.engines.flower.apps` — the ``ClientApp`` (answers fedsciml queries
  from the node's own data, described by its node config) and the
  ``ServerApp`` (plans each job of the run config with the driver, as ``fs.solve`` does, and runs it with
  :func:`fedsciml.runtime.driver.run_connected` over a :class:`FlowerTransport` on its grid); the
  Flower App that ``flwr run`` starts is ``fedsciml/engines/flower/app/``;
* :mod:`fedsciml.engines.flower.secagg` — the SecAgg+ App for one-shot fusion with central DP (Flower's
  secure sum; its Result is the driver's ``run_result``);
* :mod:`fedsciml.engines.flower.simulation` — ``fs.solve(..., engine="flower")``:
  the same app through Flower's simulation runtime (``flwr run`` on a
  ``flower-superlink --simulation`` on 127.0.0.1);
* :mod:`fedsciml.engines.flower.deploy` — a stock SuperLink (and K stock
  SuperNodes) on 127.0.0.1 as separate processes (the simulation engine, the
  demo and the tests).

Only Flower's public API and its stock programs with documented options are
used (``docs/flower.md``; what Flower lacks for fedsciml's many small
exchanges: ``docs/flower-upstream.md``).

Hygiene: importing this package turns Flower's telemetry and update check
and Ray's usage statistics off (unless the environment already says
otherwise); Ray and every listener are bound to 127.0.0.1 (Ray as a
single-machine cluster: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; it must be
imported after this package).
"""
from __future__ import annotations

import os

# before flwr / ray are imported anywhere below
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
# Ray 2.55 turns ray.init(_node_ip_address="127.0.0.1") into the machine's address and then listens on every
# interface; as a single-machine Ray (its default on macOS/Windows) it uses and binds 127.0.0.1 only
# (checked with `ss -ltnp`: every Ray listener on 127.0.0.1)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def require_flower():
    """Check that flwr is installed, or raise one clear line (a ``ValueError``: the CLI prints it, exit 2) saying
    how to install it.  The check does not import flwr: the process that starts a simulation only launches
    Flower's programs and reads the result files (importing flwr there cost ~1 s before anything started)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("flwr") is not None
    except (ImportError, ValueError):  # a broken installation, or a flwr module without a spec
        found = False
    if not found:
        raise ValueError('engine "flower" needs Flower: pip install "flwr[simulation]>=1.41,<1.43" (or, in a '
                         'fedsciml checkout, pip install ".[flower]")')
