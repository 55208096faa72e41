"""A stock Flower deployment on 127.0.0.1 with one SuperNode killed mid-run (issue 38.3 / 38.9), end to end.

One ``flower-superlink`` and two stock ``flower-supernode`` s on 127.0.0.1 (telemetry off, every listener on
loopback: :class:`fedsciml.engines.flower.deploy.LocalDeployment`) run gn on sin1d; SuperNode 1 is killed (SIGKILL)
after it pulled ``--after`` messages and never comes back.  Measured: the seconds from the kill to the end of
``flwr run``, the error line(s) naming the dead client, and what the job's ``out`` holds (result.json's
``stop_reason`` and rounds, model.safetensors).  The bound is ``dead-after`` (+ one exchange's ``timeout`` where the
live client shares it: :mod:`fedsciml.engines.flower.transport`).

    OMP_NUM_THREADS=1 nice python scripts/tools/flower_killed_node.py [--timeout 60] [--dead-after 10] [--keep DIR]

``tests/test_flower_killed_node.py`` runs :func:`run` and checks these figures."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(workdir: str, *, timeout_s: float = 60.0, dead_after_s: float = 10.0, after: int = 4,
        start_wait_s: float = 300.0) -> dict:
    """The deployment, the kill and what the run left (see the module docstring); every process stopped at the
    end, also on an error."""
    from fedsciml.engines.flower.deploy import LocalDeployment
    from fedsciml.engines.flower.resultio import read_result

    with LocalDeployment(2, workdir, threads=1) as d:
        out = d.dir / "out"
        proc = d.submit_config({"problem": "sin1d", "method": "gn", "clients": 2, "seed": 0,
                                "problem-options": json.dumps({"n_samples": 20}),
                                "method-options": json.dumps({"rounds": 100000}), "out": str(out),
                                "timeout": float(timeout_s), "connect-timeout": float(start_wait_s),
                                "dead-after": float(dead_after_s)})
        log, runlog = d.dir / "node1.log", d.dir / "flwr-run-run.log"
        end = time.monotonic() + start_wait_s
        while log.read_text(errors="replace").count("Receiving: query.") < after:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("the run ended or stalled before the kill:\n" + runlog.read_text()[-4000:])
            time.sleep(0.2)
        d.kill("node1")
        killed = time.monotonic()
        proc.wait(timeout=dead_after_s + timeout_s + 300)
        held = time.monotonic() - killed
        text = runlog.read_text(errors="replace")
    res = read_result(str(out)) if (out / "result.json").exists() else None
    return {"held_s": held, "timeout_s": timeout_s, "dead_after_s": dead_after_s,
            "lines": [ln for ln in text.splitlines() if "has answered nothing for" in ln and ln.startswith("error:")],
            "log": text, "out": str(out), "stop_reason": res.stop_reason if res else None,
            "rounds": res.extra.get("rounds") if res else None,
            "steps": [r["step"] for r in res.history] if res else [], "theta": res.theta if res else None,
            "model": (out / "model.safetensors").exists()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="run config timeout (s), default 60")
    ap.add_argument("--dead-after", type=float, default=10.0, help="run config dead-after (s), default 10")
    ap.add_argument("--after", type=int, default=4, help="kill node 1 after it pulled this many messages")
    ap.add_argument("--keep", default=None, help="keep the deployment's logs and out in this folder")
    a = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        r = run(a.keep or tmp, timeout_s=a.timeout, dead_after_s=a.dead_after, after=a.after)
    print(f"held {r['held_s']:.1f} s after the kill (bound dead-after {a.dead_after:g} + timeout {a.timeout:g} s)")
    print(f"error line(s): {r['lines']}")
    print(f"out: stop_reason {r['stop_reason']}, rounds {r['rounds']}, model {r['model']}")
    return 0 if r["lines"] and r["model"] and r["stop_reason"] == "failed" else 1


if __name__ == "__main__":
    sys.exit(main())
