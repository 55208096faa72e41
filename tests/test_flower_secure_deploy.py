"""Issue 38.9: the site guide's security steps (docs/flower-sites.md, "Who can run code at a site"), followed as
written on 127.0.0.1: certificates made with openssl, a SuperLink with TLS and SuperNode authentication, a site's
key registered with ``flwr supernode register``.  The registered site connects over TLS; a SuperNode with an
unregistered key is refused (Flower logs its exit code 305; the process status is 1), and one without TLS never connects.  Telemetry off; every
process is started here in its own session, bounded in time and killed at the end."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("flwr")
if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
    pytest.skip("needs openssl and ssh-keygen", allow_module_level=True)

from fedsciml.engines.flower.deploy import HOST, _wait_port, descendants, free_port  # noqa: E402

BIN = os.path.dirname(sys.executable)


def _sh(*argv, cwd, env=None, timeout=120):
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{argv[:3]}: {r.stderr[-1500:]}{r.stdout[-1500:]}"
    return r.stdout


@pytest.mark.slow
def test_tls_and_supernode_auth_on_loopback_as_the_guide_says(tmp_path):
    d = tmp_path
    # 1. the certificates (docs/flower-sites.md, step 1): a CA, and the SuperLink's key and certificate for its name
    _sh("openssl", "req", "-x509", "-newkey", "rsa:3072", "-nodes", "-days", "30", "-subj", "/CN=fedsciml CA",
        "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    _sh("openssl", "req", "-newkey", "rsa:3072", "-nodes", "-subj", f"/CN={HOST}", "-keyout", "server.key",
        "-out", "server.csr", cwd=d)
    (d / "server.ext").write_text(f"subjectAltName=IP:{HOST}\n")
    _sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "30", "-extfile", "server.ext", "-out", "server.pem", cwd=d)
    # 2. each site's key pair (step 2)
    for name in ("site0", "rogue"):
        _sh("ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", name, "-C", name, cwd=d)
    port, node_ports = free_port(), [free_port(), free_port(), free_port()]
    home = d / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "secure"\n\n[superlink.secure]\naddress = '
                                      f'"{HOST}:{port}"\nroot-certificates = "{d / "ca.crt"}"\n')
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_HOME": str(home),
           "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    procs = {}

    def start(name, *argv):
        with open(d / f"{name}.log", "w") as log:
            procs[name] = subprocess.Popen([os.path.join(BIN, argv[0]), *map(str, argv[1:])], cwd=d, env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return procs[name]

    def log(name):
        return (d / f"{name}.log").read_text(errors="replace")

    try:
        # 3. the SuperLink (step 3): TLS, SuperNode authentication, no runtime installs, here on loopback
        sl = start("superlink", "flower-superlink", "--ssl-ca-certfile", "ca.crt", "--ssl-certfile", "server.pem",
                   "--ssl-keyfile", "server.key", "--enable-supernode-auth", "--disable-runtime-dependency-installation",
                   "--host", HOST, "--port", port)
        _wait_port(port, 120, sl, "flower-superlink")
        # 4. register the site's public key (step 4)
        out = _sh(os.path.join(BIN, "flwr"), "supernode", "register", "site0.pub", "secure", "--format", "json",
                  cwd=d, env=env)
        assert json.loads(out[out.index("{"):]).get("success") is True, out
        # 5. the sites (step 5): the registered one over TLS with its private key; an unregistered key; no TLS
        start("site0", "flower-supernode", "--superlink", f"{HOST}:{port}", "--root-certificates", "ca.crt",
              "--auth-supernode-private-key", "site0", "--node-config", "partition-id=0 num-partitions=1",
              "--port", node_ports[0])
        rogue = start("rogue", "flower-supernode", "--superlink", f"{HOST}:{port}", "--root-certificates", "ca.crt",
                      "--auth-supernode-private-key", "rogue", "--node-config", "partition-id=0 num-partitions=1",
                      "--port", node_ports[1])
        # the plain site gives up after --max-wait-time s of failed connections, and the loop below waits for that:
        # 8 s (was 20) is still many attempts against a SuperLink that is already up and serving TLS
        plain = start("plain", "flower-supernode", "--superlink", f"{HOST}:{port}", "--insecure", "--max-wait-time",
                      "8", "--node-config", "partition-id=0 num-partitions=1", "--port", node_ports[2])
        end, online = time.monotonic() + 240, []
        while time.monotonic() < end and not (online and rogue.poll() is not None and plain.poll() is not None):
            out = _sh(os.path.join(BIN, "flwr"), "supernode", "ls", "secure", "--format", "json", cwd=d, env=env)
            online = [n for n in json.loads(out[out.index("{"):]).get("nodes", []) if n.get("status") == "online"]
            time.sleep(2)
        assert len(online) == 1, f"registered site not online: {out}\n{log('site0')[-2000:]}"
        assert procs["site0"].poll() is None  # still connected
        assert rogue.poll() not in (None, 0) and "Failed to activate SuperNode" in log("rogue"), log("rogue")[-2000:]
        assert "No SuperNode found with the given public key" in log("superlink")
        assert plain.poll() not in (None, 0), log("plain")[-2000:]  # no TLS: it never connected, gave up
    finally:
        for p in procs.values():  # each process, and its helpers (some run in sessions of their own)
            for pid in [*descendants(p.pid), p.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait(timeout=10)
