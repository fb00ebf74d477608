# Sourced by the scripts that run shards with --replicas 2 (deploy/local/cluster.sh,
# bench/replication_overhead.sh): `start_etcd DIR` starts Debian's etcd (etcd-server) on
# loopback ports picked for it, its data in DIR, and sets ETCD_ENDPOINT (host:port, for
# ps-server --etcd) and ETCD_PID; stop it with `kill "$ETCD_PID"`. For a real cluster, run etcd
# as its documentation says (three members on separate machines) and give the shards its
# address.
start_etcd() {
  local dir="$1" port peer
  command -v etcd >/dev/null || { echo "etcd is not installed (deploy/install_deps.sh)" >&2; return 2; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  etcd --name=hetps-local --data-dir="$dir/data" --listen-client-urls="http://127.0.0.1:$port" \
    --advertise-client-urls="http://127.0.0.1:$port" --listen-peer-urls="http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="hetps-local=http://127.0.0.1:$peer" --log-level=warn >"$dir/etcd.log" 2>&1 &
  ETCD_PID=$!
  ETCD_ENDPOINT="127.0.0.1:$port"
  for _ in $(seq 100); do
    if etcd_ready "$ETCD_ENDPOINT"; then return 0; fi
    sleep 0.1
  done
  echo "etcd did not start: $(cat "$dir/etcd.log")" >&2
  kill "$ETCD_PID" 2>/dev/null
  return 1
}

# Whether etcd answers its health endpoint (plain HTTP on the client port).
etcd_ready() {
  python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen("http://" + sys.argv[1] + "/health", timeout=1).read()
PY
}
