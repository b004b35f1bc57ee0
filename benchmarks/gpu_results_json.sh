#!/usr/bin/env bash
# gpu_results_json.sh: the results file of gpu_check.sh, from chorus_bench_gpu CSVs.
#
#   benchmarks/gpu_results_json.sh --date YYYY-MM-DD --card NAME CSV... > gpu-<date>.json
#
# Writes one JSON object to stdout:
#   {"date", "card", "rows": [{"collective", "algo", "processes", "ranks",
#    "size_bytes", "time_us", "moved_over_copy", "nccl_time_us", ...}]}
# one row per data line of every CSV, in the order given. "algo" is the
# policy as --algo named it, "default" for automatic (the default policy);
# "processes" is CSV column 23 (1 where the CSV has no such column: virtual
# ranks of one process); "nccl_time_us" is CSV column 25 (NCCL's time for
# the same row, measured where NCCL runs: one rank per device, several
# devices), null elsewhere; "limit_us" is column 26 (on one device: the
# least bytes moved over the copy bandwidth), null elsewhere. Each
# row also carries the fields that tell rows apart: "type", "channels",
# "chunk_bytes" (the tuning; automatic chooses its own), "devices",
# "buffers" (device | registered | staged), "chosen" (the algorithm that
# ran), "busbw_gbps", "copy_gbps", "wrong", and "run" (the CSV's file name
# without .csv). A value that is not a number becomes null. awk and bash
# only: the GPU machines are minimal. Columns: see gpu_check.sh.
set -euo pipefail

DATE=
CARD=
while (($#)); do
    case "$1" in
    --date)
        DATE=$2
        shift 2
        ;;
    --card)
        CARD=$2
        shift 2
        ;;
    -h | --help)
        sed -n '2,/^set -e/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" | sed '$d'
        exit 0
        ;;
    --)
        shift
        break
        ;;
    -*)
        echo "gpu_results_json.sh: unknown option '$1'" >&2
        exit 2
        ;;
    *) break ;;
    esac
done
[[ -n $DATE ]] || DATE=$(date -u +%F)
[[ -n $CARD ]] || CARD=unknown
(($#)) || set -- /dev/null # no CSV: no rows (awk would read stdin)

awk -v date="$DATE" -v card="$CARD" '
function str(s) {
    gsub(/\\/, "\\\\", s)
    gsub(/"/, "\\\"", s)
    return "\"" s "\""
}
function num(s) {
    return s ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/ ? s : "null"
}
BEGIN {
    printf "{\n  \"date\": %s,\n  \"card\": %s,\n  \"rows\": [", str(date), str(card)
    rows = 0
}
FNR == 1 {
    run = FILENAME
    sub(/^.*\//, "", run)
    sub(/\.csv$/, "", run)
}
FNR == 1 && $1 == "collective" { next } # the header
NF < 21 { next }                        # not a data line
{
    gsub(/\r/, "")
    algo = $3 == "automatic" ? "default" : $3
    procs = NF >= 23 && $23 != "" ? $23 : 1
    buffers = NF >= 24 && $24 != "" ? $24 : "device"
    nccl = NF >= 25 ? num($25) : "null"
    limit = NF >= 26 ? num($26) : "null"
    printf "%s\n    {\"collective\": %s, \"algo\": %s, \"processes\": %s, \"ranks\": %s, \"size_bytes\": %s, " \
           "\"time_us\": %s, \"moved_over_copy\": %s, \"nccl_time_us\": %s, \"limit_us\": %s, \"type\": %s, " \
           "\"channels\": %s, " \
           "\"chunk_bytes\": %s, \"devices\": %s, \"buffers\": %s, \"chosen\": %s, \"busbw_gbps\": %s, " \
           "\"copy_gbps\": %s, \"wrong\": %s, \"run\": %s}",
           rows++ ? "," : "", str($1), str(algo), num(procs), num($6), num($12), num($14), num($20), nccl, limit, str($2),
           num($4), num($5), num($7), str(buffers), str(NF >= 22 ? $22 : $3), num($16), num($19), num($21), str(run)
}
END { printf "%s]\n}\n", rows ? "\n  " : "" }
' FS=, "$@"
