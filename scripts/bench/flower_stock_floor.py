"""The floor of one exchange on stock Flower processes: an echo app (no torch, no fedsciml) on 127.0.0.1.

A stock ``flower-superlink`` and one stock ``flower-supernode`` (Flower's defaults: ``--isolation
subprocess``, a ``flwr-clientapp`` process per message); a ServerApp sends ``--n`` small messages one after
the other (push, then pull every 5 ms until the reply is there) and records each round trip; the ClientApp
imports only ``flwr.app`` / ``flwr.clientapp`` and echoes the message.  Compared with fedsciml's small
exchange on the same deployment (``scripts/bench/flower_overhead.py``), the difference is what importing torch and
fedsciml and building the client costs in each fresh ClientApp process; the echo's own time is Flower's fixed
waits (the SuperNode's 3 s idle sleep, the SuperExec's task poll, the 0.5 s reply wait) plus starting a
``flwr-clientapp`` process.  Also times ``python -c 'import flwr.clientapp'`` and the same with fedsciml's app.

    OMP_NUM_THREADS=1 nice python scripts/bench/flower_stock_floor.py --n 8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

ECHO_APP = '''
import json
import time

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

client_app = ClientApp()


@client_app.query()
def echo(msg, context):
    return Message(RecordDict({"echo": ConfigRecord({"x": msg.content.config_records["ping"]["x"]})}), reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid, context):
    n, out = int(context.run_config["n"]), str(context.run_config["out"])
    while not grid.get_node_ids():
        time.sleep(0.05)
    node = next(iter(grid.get_node_ids()))
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        (mid,) = grid.push_messages([Message(RecordDict({"ping": ConfigRecord({"x": i})}), node, "query")])
        got = []
        while not got:
            got = list(grid.pull_messages([mid]))
            if not got:
                time.sleep(0.005)
        times.append(time.perf_counter() - t0)
    with open(out + ".part", "w") as f:
        json.dump(times, f)
    import os
    os.replace(out + ".part", out)
'''

PYPROJECT = '''[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "echo-app"
version = "1.0.0"
description = "one small message there and back"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedsciml"

[tool.flwr.app.components]
serverapp = "echo_app:server_app"
clientapp = "echo_app:client_app"

[tool.flwr.app.config]
n = 5
out = ""
'''


def import_time(code: str, env) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="messages, one after the other")
    ap.add_argument("--wait", type=float, default=900.0, help="seconds before the run counts as failed")
    args = ap.parse_args(argv)
    from fedsciml.engines.flower.deploy import REPO_ROOT, LocalDeployment

    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        app = os.path.join(tmp, "echo")
        os.makedirs(app)
        with open(os.path.join(app, "pyproject.toml"), "w") as f:
            f.write(PYPROJECT)
        with open(os.path.join(app, "echo_app.py"), "w") as f:
            f.write(ECHO_APP)
        with open(os.path.join(app, "README.md"), "w") as f:
            f.write("echo\n")
        with LocalDeployment(1, os.path.join(tmp, "run")) as d:
            out = os.path.join(tmp, "times.json")
            proc = d.submit_config({"n": args.n, "out": out}, "echo", app=app)
            d.wait_files(proc, [out], args.wait)
            with open(out) as f:
                times = json.load(f)
        env = {**os.environ, "PYTHONPATH": REPO_ROOT}
        imp_flwr = import_time("import flwr.clientapp, flwr.app", env)
        imp_app = import_time("import flwr.clientapp, flwr.app; import fedsciml.engines.flower.apps", env)
    load = os.getloadavg()
    lines = [f"load average {load0[0]:.1f} at the start, {load[0]:.1f} at the end, {os.cpu_count()} cores", "",
             "| what | seconds |", "|---|---|",
             f"| echo exchange on stock processes, median of {len(times)} | {statistics.median(times):.2f} |",
             f"| echo exchange, min / max | {min(times):.2f} / {max(times):.2f} |",
             f"| `python -c 'import flwr.clientapp, flwr.app'` (a new process) | {imp_flwr:.2f} |",
             f"| the same plus `import fedsciml.engines.flower.apps` (torch, fedsciml) | {imp_app:.2f} |"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
