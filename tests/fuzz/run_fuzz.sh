#!/bin/sh
# Run the importer fuzzer for SECONDS over a seed corpus of the importer
# test models (generated now, into a temp dir) and the committed inputs of
# past crashes (regress/).
#   run_fuzz.sh FUZZER PYTHON make_import_models.py SECONDS ARTIFACT_DIR
set -eu
fuzzer=$1 python=$2 script=$3 seconds=$4 artifacts=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpdlf-fuzz-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/models" "$tmp/corpus" "$artifacts"
"$python" "$script" "$tmp/models" >/dev/null
# small models only: big ones would just slow every iteration down
find "$tmp/models" -name '*.onnx' -size -64k -exec cp {} "$tmp/corpus/" \;
find "$tmp/models/bad" -name '*.onnx' -size -64k | while read -r f; do cp "$f" "$tmp/corpus/bad_$(basename "$f")"; done
# inputs that once crashed (committed): every run replays them first
for f in "$(dirname "$0")"/regress/*; do [ -f "$f" ] && cp "$f" "$tmp/corpus/regress_$(basename "$f")"; done
echo "corpus: $(ls "$tmp/corpus" | wc -l) files"
# not exec: the shell must outlive the fuzzer for its EXIT trap to remove $tmp.
# -timeout: an input may take the importer up to its unroll bound (1 << 18
# nodes, onnx/control.c) before it is refused; regress/loop-unrolled-*
# does, which took 11-28 s under ASan on a loaded machine. A hang still
# ends as a finding, after 60 s.
"$fuzzer" -max_total_time="$seconds" -max_len=16384 -timeout=60 -rss_limit_mb=2048 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" "$tmp/corpus"
