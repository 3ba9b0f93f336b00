#!/usr/bin/env bash
# layers.sh: the #include lines keep the layering of the sources: each libcommon subsystem includes only
# itself and those below it, in the order util io tok data comm model config gen ckpt report train serve
# (a folder missing from the order fails until it is placed); kernels/ includes nothing from libcommon;
# and the programs that only use a trained model (mt-eval, mt-generate, mt-serve, mt-ckpt-convert)
# include nothing from train/, the trainer.
. "$(dirname "$0")/../lib.sh"
order=(util io tok data comm model config gen ckpt report train serve)
rank_of() {
    local i
    for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
    echo -1
}
# include_lines FILE...: "file:line:included/path" for every #include "..." or <...> of the files
include_lines() {
    grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]+[">]' "$@" 2>/dev/null |
        sed -E 's/^([^:]*):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">].*/\1:\2:\3/'
}
cd "$T_TOP" || exit 1
subs=()
for d in libcommon/*/; do subs+=("$(basename "$d")"); done

# libcommon: a subsystem's includes of libcommon folders are of its own layer or lower ones
total=0
for s in "${subs[@]}"; do
    files=(libcommon/"$s"/*.[ch])
    [ -e "${files[0]}" ] || continue
    r=$(rank_of "$s")
    if [ "$r" -lt 0 ]; then t_fail "libcommon/$s is in the layer order" "add it to the order, here and in README.md's layout"; continue; fi
    bad=""
    while IFS=: read -r f n inc; do
        total=$((total + 1))
        top=${inc%%/*}
        [ "$top" != "$inc" ] || continue
        ir=$(rank_of "$top")
        [ "$ir" -gt "$r" ] && bad="$bad $f:$n:$inc"
    done < <(include_lines "${files[@]}")
    if [ -z "$bad" ]; then t_pass "libcommon/$s includes nothing above it"
    else t_fail "libcommon/$s includes nothing above it" "includes a higher layer:$bad"; fi
done
# the scan saw the include lines (a broken pattern would pass everything)
if [ "$total" -gt 100 ]; then t_pass "include lines of libcommon scanned ($total)"
else t_fail "include lines of libcommon scanned" "only $total"; fi

# kernels/: no libcommon folder, no path through libcommon
bad=""
while IFS=: read -r f n inc; do
    top=${inc%%/*}
    case $inc in *libcommon*) bad="$bad $f:$n:$inc"; continue ;; esac
    [[ $top != "$inc" && $top =~ ^[A-Za-z0-9_]+$ && -d libcommon/$top ]] && bad="$bad $f:$n:$inc"
done < <(include_lines $(find kernels -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \)))
if [ -z "$bad" ]; then t_pass "kernels/ includes nothing from libcommon"
else t_fail "kernels/ includes nothing from libcommon" "includes:$bad"; fi

# the programs of a trained model: nothing from train/
for p in mt-eval mt-generate mt-serve mt-ckpt-convert; do
    if [ ! -f "cmd/$p.c" ]; then t_fail "cmd/$p.c includes nothing from train/" "no cmd/$p.c"; continue; fi
    bad=$(include_lines "cmd/$p.c" | grep -E ':train/' | tr '\n' ' ')
    if [ -z "$bad" ]; then t_pass "cmd/$p.c includes nothing from train/"
    else t_fail "cmd/$p.c includes nothing from train/" "includes: $bad"; fi
done
