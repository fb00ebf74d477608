#!/bin/bash
# The systemd unit for a shard (deploy/systemd/): systemd-analyze verify accepts it, and its
# command line, with the example environment file and a token credential, starts a ps-server
# that serves (so its flags are ones the binary takes). Exits 77 (skipped) without systemd.
#
#   tests/deploy/systemd_unit_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir="$1"
build_dir="$(cd "$2" && pwd)"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze is not installed"; exit 77; }

work=$(mktemp -d)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT

# The unit as an instance, its program where this build has it (verify checks it exists).
unit="$work/hetps-shard@0.service"
sed "s|/usr/local/bin/ps-server|$build_dir/server/ps-server|" \
  "$source_dir/deploy/systemd/hetps-shard@.service" >"$unit"
if ! out=$(systemd-analyze verify "$unit" 2>&1) || [ -n "$out" ]; then
  echo "systemd-analyze verify: $out"
  exit 1
fi

# ExecStart as systemd would run it: %i, ${VAR} (one word), $VAR (split), the credential.
exec_start=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$unit" | sed 's/^ExecStart=//; s/\\$//' | tr '\n' ' ')
set -a
# shellcheck source=/dev/null
source "$source_dir/deploy/systemd/shard.env"
set +a
HETPS_HOST=127.0.0.1
HETPS_PORT=0
HETPS_BULK_PORT=0
# The env file's metrics port, made any free one here (tests may run side by side).
HETPS_EXTRA_FLAGS=${HETPS_EXTRA_FLAGS/--metrics_port 9400/--metrics_port 0}
CREDENTIALS_DIRECTORY="$work/credentials"
mkdir -p "$CREDENTIALS_DIRECTORY"
head -c 32 /dev/urandom | base64 >"$CREDENTIALS_DIRECTORY/token"
command_line=${exec_start//%i/0}
command_line=$(eval "echo $command_line")
echo "ExecStart: $command_line"
# shellcheck disable=SC2086
$command_line --port_file "$work/port" --lifetime_s 30 >"$work/shard.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  [ -s "$work/port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/shard.log"; exit 1; }
  sleep 0.1
done
[ -s "$work/port" ] || { echo "the shard did not start"; cat "$work/shard.log"; exit 1; }
grep -q "listening on 127.0.0.1:$(cat "$work/port")" "$work/shard.log" || { cat "$work/shard.log"; exit 1; }
# The bulk port it picked (HETPS_BULK_PORT=0 here) is in the log, and it is listening.
bulk_port=$(grep -o 'bulk port 127.0.0.1:[0-9]*' "$work/shard.log" | head -n 1 | sed 's/.*://' || true)
[ -n "$bulk_port" ] && [ "$bulk_port" != 0 ] || { echo "no bulk port in the log"; cat "$work/shard.log"; exit 1; }
python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5).close()' \
  "$bulk_port" || { echo "nothing listens on the bulk port $bulk_port"; exit 1; }
if grep -q "$(cat "$CREDENTIALS_DIRECTORY/token")" "$work/shard.log"; then
  echo "the token shows in the log"
  exit 1
fi
metrics=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$work/shard.log" | head -n 1)
[ -n "$metrics" ] || { echo "the shard serves no metrics"; cat "$work/shard.log"; exit 1; }
python3 -c 'import sys, urllib.request; sys.exit(urllib.request.urlopen(sys.argv[1]).status != 200)' \
  "${metrics%/metrics}/readyz" || { echo "the shard is not ready"; exit 1; }
echo "the unit verifies and its command line starts a shard that serves and is ready"
