# amdgpu-kernels.awk: one tab-separated row per kernel of an AMD code object,
# from its metadata (llvm-readelf --notes) and the assembly the compiler wrote
# for it (clang -save-temps), whose "; Occupancy: N" is the compiler's own count
# of waves per SIMD that the kernel's registers and static LDS allow.
#
# usage: awk -v arch=gfxNNNN -v src=NAME -f amdgpu-kernels.awk NOTES ASM
# columns: arch, src, kernel (the function's name without its template
# arguments), mangled name, wavefront_size, vgpr_count, agpr_count, sgpr_count,
# vgpr_spill_count, sgpr_spill_count, group_segment_fixed_size (static LDS
# bytes), private_segment_fixed_size (scratch bytes per lane), occupancy.
# A source without kernels gives no row; exits 1 when a kernel has no
# occupancy line.

# The identifier of a mangled kernel name: _Z<length><identifier>...
function base_name(m,    rest, n) {
    if (m !~ /^_Z[0-9]/) return m
    rest = substr(m, 3)
    n = rest + 0
    return substr(rest, length(n "") + 1, n)
}

function flush() {
    if (name != "") {
        order[++nk] = name
        for (k in f) meta[name, k] = f[k]
    }
    name = ""
    delete f
}

FNR == NR {
    if ($0 ~ /^  - /) { flush(); inkern = 1 }
    else if ($0 ~ /^[a-z.]/) { flush(); inkern = 0 }
    if (inkern && match($0, /^(  - |    )\.[a-z_]+:/)) {
        key = substr($0, RSTART, RLENGTH)
        sub(/^ *-? *\./, "", key)
        sub(/:$/, "", key)
        val = $0
        sub(/^[^:]*: */, "", val)
        if (key == "name") name = val
        else f[key] = val
    }
    next
}

# The assembly: a kernel's label, then its "; Occupancy:" comment.
/^[A-Za-z_][A-Za-z0-9_.$]*:/ { label = $0; sub(/:.*/, "", label) }
/^; Occupancy: / { occ[label] = $3 }

END {
    flush()
    for (i = 1; i <= nk; i++) {
        n = order[i]
        if (!((n) in occ)) { print "no occupancy for " n > "/dev/stderr"; bad = 1 }
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", arch, src, base_name(n), n,
            meta[n, "wavefront_size"], meta[n, "vgpr_count"], meta[n, "agpr_count"] + 0,
            meta[n, "sgpr_count"], meta[n, "vgpr_spill_count"] + 0, meta[n, "sgpr_spill_count"] + 0,
            meta[n, "group_segment_fixed_size"], meta[n, "private_segment_fixed_size"],
            occ[n]
    }
    exit bad
}
