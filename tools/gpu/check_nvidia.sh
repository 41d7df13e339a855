#!/bin/sh
# check_nvidia.sh [BUILD_DIR] — the prepared check for a machine with an
# NVIDIA GPU: tools/gpu/check_gpu.sh nvidia (its header says what it runs).
exec "$(dirname "$0")/check_gpu.sh" nvidia "$@"
