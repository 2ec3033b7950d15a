#!/bin/sh
# Install what is missing (Debian 12, as root), build, then run the demo or the tests.
#   tools/setup.sh run     build, then train a 3D U-Net under a budget on the embedded store
#   tools/setup.sh test    build, then run the whole test suite
#   tools/setup.sh exports also install PyTorch, then rewrite tests/exports with
#                          tools/make_exports.py (the tests do not need PyTorch)
#   tools/setup.sh bench   also install PyTorch, oneDNN, BLIS, libxsmm and Node.js with
#                          ONNX Runtime (npm, into $BUILD/ort), build, then run issue 16's
#                          benchmark (bench/bench_models.py) and the convolution library
#                          comparison (hpdlf-bench-conv-libs); both end with a JSON line
# Idempotent: installs nothing and stays quiet when everything is there.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-run}
BUILD=${HPDLF_BUILD:-build}

PACKAGES="meson ninja-build pkg-config gcc protobuf-c-compiler libprotobuf-c-dev libopenblas-dev
libcmocka-dev libonnx-dev liburing-dev libpmem-dev libfabric-dev libisal-dev libjson-c-dev
libsodium-dev libopenmpi-dev openmpi-bin python3 python3-numpy python3-onnx fio clang libclang-rt-14-dev graphviz
libmicrohttpd-dev python3-prometheus-client"
PACKAGES="$PACKAGES python3-torch" # tests/train/check_numerics.py makes its PyTorch references
[ "$mode" = exports ] && PACKAGES="$PACKAGES python3-torch python3-torchvision"
if [ "$mode" = bench ]; then
	PACKAGES="$PACKAGES python3-torch python3-torchvision libdnnl-dev libblis-dev libxsmm-dev nodejs"
	command -v npm >/dev/null || PACKAGES="$PACKAGES npm"
fi

missing=""
for p in $PACKAGES; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "setup: installing:$missing"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -f "$BUILD/build.ninja" ]; then
	meson setup "$BUILD" -Dwerror=true >/dev/null
fi
ninja -C "$BUILD" >/dev/null || ninja -C "$BUILD"

case "$mode" in
run)
	# Train a 3D U-Net (48^3, base 16) on synthetic volumes under a budget
	# well below its in-core footprint, spilling to $TMPDIR.
	demo="$BUILD/demo"
	mkdir -p "$demo"
	[ -f "$demo/unet3d.onnx" ] || /usr/bin/python3 tools/make_unet3d.py "$demo/unet3d.onnx" >/dev/null
	[ -f "$demo/y.npy" ] || /usr/bin/python3 tools/make_volumes.py "$demo/x.npy" "$demo/y.npy" --n 8
	exec "$BUILD/tools/hpdlf-exec" "$demo/unet3d.onnx" --train --data "$demo/x.npy" --labels "$demo/y.npy" \
		--loss cross-entropy --optimizer adam --lr 0.001 --batch 1 --steps ${HPDLF_DEMO_STEPS:-20} \
		--budget ${HPDLF_DEMO_BUDGET:-48M} --log-json "$demo/train.jsonl"
	;;
exports)
	exec /usr/bin/python3 tools/make_exports.py
	;;
bench)
	# meson's auto features pick up the libraries installed above
	[ -d "$BUILD/ort/node_modules/onnxruntime-node" ] ||
		npm install --silent --prefix "$BUILD/ort" --ignore-scripts onnxruntime-node@1.20.1 >/dev/null
	meson setup --reconfigure "$BUILD" >/dev/null
	ninja -C "$BUILD" >/dev/null
	"$BUILD/bench/hpdlf-bench-conv-libs"
	NODE_PATH="$(cd "$BUILD" && pwd)/ort/node_modules" exec /usr/bin/python3 bench/bench_models.py "$BUILD"
	;;
test)
	exec meson test -C "$BUILD" --print-errorlogs --num-processes 2 ${HPDLF_TEST_ARGS:-}
	;;
*)
	echo "usage: tools/setup.sh run|test|exports|bench" >&2
	exit 2
	;;
esac
