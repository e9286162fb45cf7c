#!/usr/bin/env bash
# The wheels benchmarks/gpu_checks.sh needs on the GPU machine (Python 3.12, no network there), downloaded here into
# .whl/ (ignored by git; name it in the device call's `carry`), at the versions this checkout's environment runs:
#
#   bash benchmarks/gpu_wheels.sh          # then: run(..., carry=[".whl"]) with benchmarks/gpu_checks.sh
#
# litgpt, jsonargparse (and its docstring_parser, typeshed_client) are not on the machine; litgpt's TextFiles (the
# throughput step's data) imports litdata, which imports boto3 (botocore, s3transfer, jmespath): seen on one H200,
# 2026-11-28 (benchmarks/results/gpu_checks_2026-11-28/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
version() { $PY -c "from importlib.metadata import version; print(version('$1'))"; }
mkdir -p .whl
grep -qs '^/.whl/$' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
for name in litgpt jsonargparse docstring_parser typeshed_client litdata boto3 botocore s3transfer jmespath; do
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl "$name==$(version "$name")"
done
ls .whl
