# Shell functions the size sweeps in bench/ share (sourced, not run).

# bytes_of 4K -> 4096 (K, M, G suffixes; a plain number stays as it is).
bytes_of() {
  awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s));
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824;
    printf "%d\n", n }'
}

# human 4096 -> 4K, 1048576 -> 1M.
human() {
  awk -v n="$1" 'BEGIN { if (n >= 1048576) printf "%dM", n / 1048576; else printf "%dK", n / 1024 }'
}

# sweep_sizes FIRST LAST: fills SIZES with FIRST, 4 x FIRST, ... up to LAST (bytes).
sweep_sizes() {
  SIZES=()
  local size
  for ((size = $(bytes_of "$1"); size <= $(bytes_of "$2"); size *= 4)); do SIZES+=("$size"); done
}

# stats FILE SIZE COLUMN: prints "median spread" of COLUMN over FILE's rows whose first field is
# SIZE (spread: largest / smallest; "- -" when there are none).
stats() {
  awk -v size="$2" -v c="$3" '$1 == size { print $c }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
          printf "%s %s\n", v[int((NR + 1) / 2)], (v[1] > 0 ? v[NR] / v[1] : 0) }'
}

# draw_plot BUILD TABLE: with PLOT set, draws TABLE (ps-plot's tab-separated input) into $PLOT.
draw_plot() {
  [[ -n "${PLOT:-}" ]] || return 0
  "$1/bench/ps-plot" --in "$2" --out "$PLOT"
  echo "plot: $PLOT"
}

# describe_partitions PS_BENCH: the partition size the sweep's ps-bench runs used, $PARTITION_BYTES
# or, unset, ps-bench's own default (read from its --help, so the line follows the client).
describe_partitions() {
  if [[ -n "${PARTITION_BYTES:-}" ]]; then
    echo "hetps's partitions: $PARTITION_BYTES bytes"
  else
    echo "hetps's partitions: $("$1" --help 2>&1 | awk '/--partition_bytes/ { found = 1 }
      found && /default:/ { gsub(/[^0-9]/, ""); print; exit }') bytes (ps-bench's default)"
  fi
}
