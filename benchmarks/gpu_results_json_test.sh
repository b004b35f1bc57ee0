#!/usr/bin/env bash
# CTest bench.results_json: gpu_results_json.sh and gpu_check.sh --summarize
# on the fixture CSVs of benchmarks/testdata (what chorus_bench_gpu writes:
# virtual ranks without columns 23-24, one process per GPU with them, a
# row of nan/inf, and columns 25-26: NCCL's time and the one-device limit). The JSON must parse (python3 -m json.tool) and hold what
# the fixtures say; the summary must name the process run's target line.
# Exit 77 (Skipped) without python3.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA=$HERE/testdata
command -v python3 >/dev/null 2>&1 || {
    echo "CHORUS_SKIP: python3 not found (needed to validate the JSON)"
    exit 77
}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

bash "$HERE/gpu_results_json.sh" --date 2026-12-07 --card 'NVIDIA H200 "test"' \
    "$DATA/gpu_virtual.csv" "$DATA/gpu_process.csv" "$DATA/gpu_devices.csv" >"$WORK/out.json"
python3 -m json.tool "$WORK/out.json" >/dev/null
python3 - "$WORK/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["date"] == "2026-12-07" and d["card"] == 'NVIDIA H200 "test"', d
rows = d["rows"]
assert len(rows) == 9, len(rows)
for r in rows:
    for k in ("collective", "algo", "processes", "ranks", "size_bytes", "time_us", "moved_over_copy", "nccl_time_us",
              "limit_us"):
        assert k in r, (k, r)
# Columns 25-26 (NCCL's time, the one-device limit): numbers where the CSV has them, else null.
dev = [r for r in rows if r["run"] == "gpu_devices"]
assert all(r["nccl_time_us"] is None and r["limit_us"] is None for r in rows if r["run"] != "gpu_devices")
assert dev[0]["nccl_time_us"] == 2210.55 and dev[0]["limit_us"] is None and dev[0]["devices"] == 8, dev[0]
assert dev[1]["nccl_time_us"] is None and dev[1]["limit_us"] == 0.0, dev[1]
virt = [r for r in rows if r["run"] == "gpu_virtual"]
proc = [r for r in rows if r["run"] == "gpu_process"]
assert len(virt) == 3 and len(proc) == 4
assert all(r["processes"] == 1 and r["buffers"] == "device" for r in virt)
assert all(r["processes"] == 8 and r["ranks"] == 8 for r in proc)
assert virt[2]["algo"] == "default" and virt[2]["chosen"] == "two_shot", virt[2]
assert virt[1]["size_bytes"] == 268435456 and abs(virt[1]["moved_over_copy"] - 0.76369) < 1e-9
assert [r["buffers"] for r in proc] == ["registered", "registered", "staged", "registered"]
bad = proc[3]
assert bad["time_us"] is None and bad["moved_over_copy"] is None and bad["collective"] == "all_gather", bad
print("results JSON: %d rows, all fields as expected" % len(rows))
PY
# No CSV at all: an empty list.
bash "$HERE/gpu_results_json.sh" --date 2026-12-07 | python3 -c 'import json,sys; assert json.load(sys.stdin)["rows"] == []'

# gpu_check.sh --summarize on the fixtures under the names of its runs.
mkdir "$WORK/results"
cp "$DATA/gpu_virtual.csv" "$WORK/results/a_allreduce_ring.csv"
cp "$DATA/gpu_process.csv" "$WORK/results/p_allreduce_ring.csv"
echo "NVIDIA H200" >"$WORK/results/card.txt"
set +e
bash "$HERE/gpu_check.sh" --summarize "$WORK/results" >"$WORK/summary.log" 2>&1
rc=$?
set -e
cat "$WORK/summary.log"
# The fixture holds a row of nan (its #wrong is 0): the summary runs clean.
[[ $rc == 0 ]] || { echo "FAILED: gpu_check.sh --summarize exited $rc"; exit 1; }
grep -Eq '^AllReduce 8 processes x 256 MiB moved/copy +0\.718 .*target >= 0\.70: MET' "$WORK/summary.log" ||
    { echo "FAILED: no 'AllReduce 8 processes x 256 MiB moved/copy 0.718 ... MET' line"; exit 1; }
grep -Eq '^AllReduce 8 virtual ranks x 256 MiB moved/copy +0\.764 ' "$WORK/summary.log" ||
    { echo "FAILED: no virtual-rank moved/copy line"; exit 1; }
json=$(ls "$WORK"/results/gpu-*.json)
python3 -m json.tool "$json" >/dev/null
python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))["rows"]; assert len(r) == 7 and r[0]["run"] == "a_allreduce_ring", r[0]' "$json"
echo "results JSON test: OK"
