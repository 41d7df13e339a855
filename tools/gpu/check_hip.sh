#!/bin/sh
# check_hip.sh [BUILD_DIR] — the prepared check for a machine with a HIP GPU
# (Hygon DCU on DTK, or AMD on ROCm): tools/gpu/check_gpu.sh k100, or z200
# with HIP_PLATFORM=z200 (its header says what it runs). hipcc is found on
# PATH, under $ROCM_PATH/bin, $DTK_HOME/bin, /opt/dtk/bin or /opt/rocm/bin.
exec "$(dirname "$0")/check_gpu.sh" "${HIP_PLATFORM:-k100}" "$@"
