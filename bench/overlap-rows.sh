# overlap-rows.sh: the --overlap-grad-reduce rows of bench/train-dp and bench/train-mp (sourced; they set
# bin, root, work, iters, and args of a model whose gradient buckets are mostly layers'). A layout runs three
# times under mpirun: without a modelled link (s0), and with MT_COMM_LINK=$link (latency_us,GB_per_s: every
# transfer step of every group takes latency + bytes / bandwidth, comm/link.h) without (s1) and with (s2)
# --overlap-grad-reduce ($ovflags). From the "data-parallel communication per iteration" line (bytes sent B, gradient
# bytes G: n = G / 4 parameters in nb = ceil(n / bucket) buckets) the data-parallel transfers of a step take
#   comm = 2 (N - 1) (nb + 1) latency + B / bandwidth   (each bucket's ring, and the loss sums')
# and everything else on the step's path, the rest of s1, is compute = s1 - comm (the tensor and pipeline
# groups' delayed exchanges included, which this overlap does not hide). The row: s0, s1, s2, comm,
# compute, compute + comm (no overlap), max(compute, comm) (the ideal), and s2 / max(compute, comm).
# Step times are the medians of the timed iterations' "elapsed time per iteration".
median_ms() {
    grep -E '^ *(\[[^]]*\])? iteration ' "$1" | sed -E 's/.*elapsed time per iteration \(ms\): ([0-9.]+).*/\1/' |
        tail -n "$iters" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
overlap_header() {
    printf '  %-30s %8s %8s %8s %8s %8s %9s %9s %9s\n' "run (ms per step)" "no link" "link" "overlap" "comm" "compute" \
        "c + comm" "max(c, m)" "ovl/max"
}
# overlap_row NAME RANKS DP BUCKET FLAGS...   (s2 adds $ovflags: --overlap-grad-reduce by default)
ovflags=--overlap-grad-reduce
overlap_row() {
    local name=$1 n=$2 dp=$3 bucket=$4 s0 s1 s2
    shift 4
    # shellcheck disable=SC2086
    mpirun $root --oversubscribe --bind-to none -np "$n" "$bin" $args --ddp-bucket-size "$bucket" "$@" >"$work/ov0.log" 2>&1 &&
        MT_COMM_LINK=$link mpirun $root --oversubscribe --bind-to none -np "$n" "$bin" $args --ddp-bucket-size "$bucket" "$@" \
            >"$work/ov1.log" 2>&1 &&
        MT_COMM_LINK=$link mpirun $root --oversubscribe --bind-to none -np "$n" "$bin" $args --ddp-bucket-size "$bucket" "$@" \
            $ovflags >"$work/ov2.log" 2>&1 ||
        { echo "overlap rows: $name failed: $(tail -3 "$work"/ov*.log)" >&2; return 1; }
    s0=$(median_ms "$work/ov0.log") s1=$(median_ms "$work/ov1.log") s2=$(median_ms "$work/ov2.log")
    local B G
    B=$(sed -n 's/.*data-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$work/ov1.log" | head -1)
    G=$(sed -n 's/.*data-parallel communication per iteration .*| gradient bytes: \([0-9]*\) .*/\1/p' "$work/ov1.log" | head -1)
    awk -v name="$name" -v s0="$s0" -v s1="$s1" -v s2="$s2" -v B="$B" -v G="$G" -v N="$dp" -v bucket="$bucket" \
        -v link="$link" 'BEGIN {
        split(link, l, ","); lat = l[1] * 1e-3; bw = l[2] * 1e6   # ms, bytes per ms
        n = G / 4; nb = int((n + bucket - 1) / bucket)
        comm = 2 * (N - 1) * (nb + 1) * lat + B / bw; c = s1 - comm; ideal = c > comm ? c : comm
        printf "  %-30s %8.1f %8.1f %8.1f %8.1f %8.1f %9.1f %9.1f %9.2f\n", name, s0, s1, s2, comm, c, c + comm, ideal, s2 / ideal
    }'
}
