# overlap-rows.sh: the --overlap-grad-reduce rows of bench/train-dp and bench/train-mp (sourced; they set
# bin, root, work, iters, and args of a model whose gradient buckets are mostly layers'). A layout runs three
# times under mpirun: without a modelled link (s0), and with MT_COMM_LINK=$link (latency_us,GB_per_s: every
# transfer step of every group takes latency + bytes / bandwidth, comm/link.h) without (s1) and with (s2)
# --overlap-grad-reduce ($ovflags). From the "data-parallel communication per iteration" line (bytes sent B, gradient
# bytes G: n = G / 4 parameters in nb = ceil(n / bucket) buckets) the data-parallel transfers of a step take
#   comm = 2 (N - 1) (nb + 1) latency + B / bandwidth   (each bucket's ring, and the loss sums')
# and everything else on the step's path, the rest of s1 (= compute + comm, no overlap), is compute =
# s1 - comm (the tensor and pipeline groups' delayed exchanges included, which this overlap does not hide).
# The row: s0, s1, s2; the modelled comm, that compute, the ideal max(compute, comm) and s2 / max; and the
# same with the comm measured, s1 - s0, and compute = s0 (on a loaded machine each sleep of the link
# overshoots, so the measured comm is the larger).
# Step times are the medians of the timed iterations' "elapsed time per iteration" over $repeat rounds of
# the three runs (BENCH_REPEAT, default 3).
repeat=${BENCH_REPEAT:-3}
step_ms() {   # the timed iterations' step times of a log, one a line
    grep -E '^ *(\[[^]]*\])? iteration ' "$1" | sed -E 's/.*elapsed time per iteration \(ms\): ([0-9.]+).*/\1/' | tail -n "$iters"
}
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
overlap_header() {
    printf '  %-28s %8s %8s %8s | %8s %8s %8s %7s | %8s %8s %7s\n' "run (ms per step)" "no link" "link" "overlap" \
        "comm" "compute" "max" "ovl/max" "comm" "max" "ovl/max"
    printf '  %-28s %8s %8s %8s | %-33s | %-25s\n' "" "s0" "s1" "s2" "modelled: comm from the bytes" "measured: comm = s1 - s0"
}
# overlap_row NAME RANKS DP BUCKET FLAGS...   (s2 adds $ovflags: --overlap-grad-reduce by default)
ovflags=--overlap-grad-reduce
overlap_row() {
    local name=$1 n=$2 dp=$3 bucket=$4 s0 s1 s2 r i
    shift 4
    rm -f "$work"/ov[012].ms
    for r in $(seq "$repeat"); do   # the three runs in turn, so that a change of the machine's load hits each
        for i in 0 1 2; do
            local link_env="" extra=""
            [ $i -gt 0 ] && link_env=$link
            [ $i = 2 ] && extra=$ovflags
            # shellcheck disable=SC2086
            MT_COMM_LINK=$link_env mpirun $root --oversubscribe --bind-to none -np "$n" "$bin" $args --ddp-bucket-size "$bucket" \
                "$@" $extra >"$work/ov$i.log" 2>&1 || { echo "overlap rows: $name failed: $(tail -3 "$work/ov$i.log")" >&2; return 1; }
            step_ms "$work/ov$i.log" >>"$work/ov$i.ms"
        done
    done
    s0=$(median "$work/ov0.ms") s1=$(median "$work/ov1.ms") s2=$(median "$work/ov2.ms")
    local B G
    B=$(sed -n 's/.*data-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$work/ov1.log" | head -1)
    G=$(sed -n 's/.*data-parallel communication per iteration .*| gradient bytes: \([0-9]*\) .*/\1/p' "$work/ov1.log" | head -1)
    awk -v name="$name" -v s0="$s0" -v s1="$s1" -v s2="$s2" -v B="$B" -v G="$G" -v N="$dp" -v bucket="$bucket" \
        -v link="$link" 'BEGIN {
        split(link, l, ","); lat = l[1] * 1e-3; bw = l[2] * 1e6   # ms, bytes per ms
        n = G / 4; nb = int((n + bucket - 1) / bucket)
        comm = 2 * (N - 1) * (nb + 1) * lat + B / bw; c = s1 - comm; ideal = c > comm ? c : comm
        m = s1 - s0; mideal = s0 > m ? s0 : m
        printf "  %-28s %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f %7.2f | %8.1f %8.1f %7.2f\n", name, s0, s1, s2, comm, c, ideal,
            s2 / ideal, m, mideal, s2 / mideal
    }'
}
