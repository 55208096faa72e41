#!/usr/bin/env bash
# docs/flower-sites.md, "Who can run code at a site" steps 1-2 and "The researcher", followed as written on
# 127.0.0.1 with flwr 1.42 (issue 38.9).  Substitutions, each forced by one machine: the SuperLink's name
# superlink.example.org -> the address 127.0.0.1 (the guide's "IP:… for an address" SAN), --host 0.0.0.0 ->
# 127.0.0.1 (step 4 (a): nothing listens beyond loopback here), /var/lib/flower and /srv/fedsciml -> this run's
# folder, ~/.flwr -> FLWR_HOME in this folder.  Port 8000 as written (the script stops if it is taken).
# Telemetry off; every process this script starts is killed at its end.
#   bash scripts/tools/guide_security_loopback.sh [WORKDIR]
set -euo pipefail
BIN="$(dirname "$(command -v python)")"
W="${1:-$(mktemp -d)}"; mkdir -p "$W"; cd "$W"
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_HOME="$W/flwr-home" PATH="$BIN:$PATH"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null; then echo "port 8000 is taken here; stop"; exit 2; fi
step() { echo; echo "### $*"; }

step "1. TLS certificates (as written; the name is the address 127.0.0.1)"
openssl req -x509 -newkey rsa:3072 -nodes -days 365 -subj "/CN=fedsciml CA" -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr 2>/dev/null
printf "subjectAltName=IP:127.0.0.1\n" > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile server.ext -out server.pem 2>/dev/null
openssl verify -CAfile ca.crt server.pem

step "2. the site's key pair"
ssh-keygen -t ecdsa -b 384 -N "" -f site.key -q
ssh-keygen -t ecdsa -b 384 -N "" -f rogue.key -q   # a second, never registered: must be refused
ls site.key site.key.pub

step "The researcher: the SuperLink (TLS, SuperNode auth, no runtime installs, a database; --host 127.0.0.1)"
mkdir -p "$W/var-lib-flower"
flower-superlink --ssl-ca-certfile ca.crt --ssl-certfile server.pem --ssl-keyfile server.key \
    --enable-supernode-auth --disable-runtime-dependency-installation --database "$W/var-lib-flower/state.db" \
    --host 127.0.0.1 --port 8000 > superlink.log 2>&1 &
PIDS+=($!)
for i in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 1; done
grep -m2 -E "Control|Fleet" superlink.log || true

step "\$FLWR_HOME/config.toml as the guide gives it (root-certificates under FLWR_HOME/certificates)"
mkdir -p "$FLWR_HOME/certificates"; cp ca.crt "$FLWR_HOME/certificates/ca.crt"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink.deployment]
address = "127.0.0.1:8000"
root-certificates = "$FLWR_HOME/certificates/ca.crt"
TOML
cat "$FLWR_HOME/config.toml"

step "2. register the site's public key, list"
flwr supernode register site.key.pub deployment
flwr supernode ls deployment

step "2. the site, as written (data=, partition-id=0 num-partitions=3)"
printf "x,y\n1,2\n2,3\n" > site.csv
flower-supernode --superlink 127.0.0.1:8000 --root-certificates ca.crt \
    --auth-supernode-private-key site.key --node-config "data='$W/site.csv' partition-id=0 num-partitions=3" \
    > site.log 2>&1 &
PIDS+=($!)
flower-supernode --superlink 127.0.0.1:8000 --root-certificates ca.crt --port 9095 \
    --auth-supernode-private-key rogue.key --node-config "partition-id=1 num-partitions=3" > rogue.log 2>&1 &
ROGUE=$!; PIDS+=($ROGUE)
flower-supernode --superlink 127.0.0.1:8000 --insecure --port 9096 --max-wait-time 20 \
    --node-config "partition-id=2 num-partitions=3" > plain.log 2>&1 &
PLAIN=$!; PIDS+=($PLAIN)
for i in $(seq 1 90); do flwr supernode ls deployment --format json 2>/dev/null | grep -q '"online"' && break; sleep 2; done
flwr supernode ls deployment
for i in $(seq 1 60); do kill -0 $ROGUE 2>/dev/null || break; sleep 1; done
st=0; wait $ROGUE || st=$?
echo "rogue (unregistered key): process status $st; its log: $(grep -m1 -o 'Exit Code: [0-9]*' rogue.log || true), $(grep -m1 -o 'Failed to activate SuperNode' rogue.log || true)"
grep -m1 -o "No SuperNode found with the given public key" superlink.log || echo "superlink: no refusal logged"
for i in $(seq 1 90); do kill -0 $PLAIN 2>/dev/null || break; sleep 1; done
if kill -0 $PLAIN 2>/dev/null; then echo "plain (--insecure): still running"; else st=0; wait $PLAIN || st=$?; echo "plain (--insecure): process status $st; connected: $(grep -c -i 'activated\|Starting Flower ClientApp' plain.log || true)"; fi

step "4. every listener of this test on loopback"
ss -ltnp 2>/dev/null | grep -E "flower|flwr|python" | awk '{print $4}' | sort -u
step "3. the firewall rule (nftables, as written; the sites' and researcher's addresses -> 127.0.0.1, a stranger at 127.0.0.2)"
# The guide's two commands add to the table \`inet filter\`'s chain \`input\`, which a Debian host with nftables
# enabled has (its /etc/nftables.conf); where it is absent it is made as that file makes it, and removed at the end.
# Needs root (CAP_NET_ADMIN) and nft; otherwise this step says so and is not run.
stranger() {  # a TCP connection to the SuperLink's port from 127.0.0.2 (a second loopback address: not in the set)
    python - <<'PY'
import socket
s = socket.socket(); s.settimeout(3); s.bind(("127.0.0.2", 0))
try:
    s.connect(("127.0.0.1", 8000)); print("stranger 127.0.0.2 -> 127.0.0.1:8000: connected")
except OSError as e:
    print(f"stranger 127.0.0.2 -> 127.0.0.1:8000: no connection ({type(e).__name__}: {e})")
PY
}
if ! command -v nft >/dev/null || [ "$(id -u)" != 0 ]; then
    echo "nft is $(command -v nft || echo 'not installed') and uid is $(id -u): not run (needs the operator's host, root)"
else
    MADE=0
    if ! nft list chain inet filter input >/dev/null 2>&1; then
        nft add table inet filter; nft add chain inet filter input '{ type filter hook input priority filter; }'; MADE=1
    fi
    before="$(nft -a list chain inet filter input | grep -o 'handle [0-9]*$' | awk '{print $2}' | sort -n | tail -1)"
    fw_cleanup() {
        if [ "$MADE" = 1 ]; then nft delete table inet filter
        else for h in $(nft -a list chain inet filter input | grep -o 'handle [0-9]*$' | awk '{print $2}'); do
            [ "$h" -gt "${before:-0}" ] && nft delete rule inet filter input handle "$h"; done; fi
        echo "firewall rules of this step removed"
    }
    trap 'fw_cleanup; cleanup' EXIT
    echo "before the rule:"; stranger
    nft add rule inet filter input tcp dport 8000 ip saddr { 127.0.0.1 } accept
    nft add rule inet filter input tcp dport 8000 drop
    nft list chain inet filter input
    echo "after the rule:"; stranger
    echo "the researcher (127.0.0.1) still reaches Control:"; flwr supernode ls deployment
fi
