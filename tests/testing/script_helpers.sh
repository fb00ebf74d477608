# What the shell tests (and bench scripts that start processes) share. Source it after setting
# run_dir, the directory whose *.log and *.out files a failure shows.
#
#   source "$(dirname "$0")/../testing/script_helpers.sh"
#   await '[ -s "$run_dir/port" ]' 30 || ...

# Prints why, the end of every log in $run_dir, and exits 1.
fail() {
  echo "FAILED: $*" >&2
  tail -n 30 "$run_dir"/*.log "$run_dir"/*.out >&2 2>/dev/null || true
  exit 1
}

# Waits until the command in $1 succeeds, checking every $3 s (0.05), and fails after $2 s: a
# poll with a deadline, for events that leave a trace in a file or a port.
await() {
  local deadline=$(($(date +%s) + $2))
  until eval "$1"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out waiting for: $1"
    sleep "${3:-0.05}"
  done
}

# A TCP port free on address $1 (all addresses when empty) a moment ago, below the kernel's
# ephemeral range, where no outgoing connection takes it before the server binds it
# (tests/testing/free_port.py).
free_port() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py" "${1:-}"
}

# Ends (SIGKILL) every process whose pid is in the array `pids` (those the script started) and
# reaps them.
kill_started() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# Address $2 (1 or 2) of a /30 in 10.$1.0.0/16 that this script's pid picks, so that concurrent
# runs of network-namespace tests do not share subnets.
pid_subnet_address() {
  echo "10.$1.$(($$ % 250)).$((($$ / 250 % 60) * 4 + $2))"
}
