# Reads ps-bench's CSV (--csv) of a run that measured two settings in interleaved rounds, and
# prints, per transport and size, the medians over the rounds of the push+pull p50 and GB/s
# under each setting, and the ratio of `other` to `base` (p50: 1.00 means it costs nothing;
# GB/s: the share of the throughput kept).
#
#   awk -F, -v setting=security -v base=off -v other=token+tls -f compare_settings.awk out.csv
NR == 1 { for (i = 1; i <= NF; ++i) column[$i] = i; next }
{
  key = $column["transport"] SUBSEP $column["bytes"] SUBSEP $column[setting]
  p50[key] = p50[key] " " $column["p50_us"]
  gbps[key] = gbps[key] " " $column["gbps"]
  if (!($column["transport"] SUBSEP $column["bytes"] in seen)) {
    seen[$column["transport"] SUBSEP $column["bytes"]] = 1
    order[++rows] = $column["transport"] SUBSEP $column["bytes"]
  }
}
function median(list,    values, n, i, j, t) {
  n = split(list, values, " ")
  for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j)
    if (values[j] + 0 < values[i] + 0) { t = values[i]; values[i] = values[j]; values[j] = t }
  return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
}
END {
  printf "%-9s %9s | %14s %14s %6s | %12s %12s %6s\n", "transport", "bytes",
         "p50 " base, "p50 " other, "x p50", "GB/s " base, "GB/s " other, "x GB/s"
  for (r = 1; r <= rows; ++r) {
    split(order[r], part, SUBSEP)
    b = order[r] SUBSEP base; o = order[r] SUBSEP other
    p_b = median(p50[b]); p_o = median(p50[o])
    g_b = median(gbps[b]); g_o = median(gbps[o])
    printf "%-9s %9d | %14.1f %14.1f %6.2f | %12.3f %12.3f %6.2f\n", part[1], part[2],
           p_b, p_o, p_o / p_b, g_b, g_o, g_o / g_b
  }
}
