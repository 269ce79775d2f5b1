#!/usr/bin/env bash
# Villacampa-Calvo & Hernández-Lobato (2017) Tables 2-3 on the paper's sets (issue 40), on the 16-core + GPU
# device machine, from the repository root, with .whl/ and .devdata/ (mlbench .rda files) carried.
# Tested locally with: OUT=/tmp/uciout PYTHON=/work/main/.venv/bin/python INSTALL_WHEELS=0 UCI_NAME=uci_local \
#   UCI_ARGS="--datasets glass --splits 1" bash device_uci.sh
set -euo pipefail
PYTHON=${PYTHON:-python3}
OUT=${OUT:?set OUT to the folder the results go to}
# INSTALL_WHEELS=0 where the interpreter already has them (the wheels are for Python 3.12)
if [ "${INSTALL_WHEELS:-1}" = 1 ]; then
  "$PYTHON" -m pip install --quiet --no-index --no-deps --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:src:.
export PEP_DATA_DIR=.devdata
# 15 pinned CPU children on cores 0-14, Satellite's units (one split each) one at a time on the GPU (its child
# on core 15; idle cores take its smallest waiting units); Satellite 10 splits, the other sets 20; EP at Adam
# learning rate 0.01 (at 0.05 it ends far from the paper on vowel, vehicle and glass), SEP at 0.05. The
# budget leaves time to copy the results before the call's limit (about 8 minutes).
UCI_ARGS=${UCI_ARGS:---splits 20 --splits-of satellite=10 --ep-learning-rate 0.01 --jobs 15 --gpu satellite --time-budget 400}
NAME=${UCI_NAME:-multiclass_uci}
# The results file is written after every finished setting straight into $OUT (through a link in place of
# this copy's committed file), so a run killed at the call's limit still returns what it finished. With
# --merge (a second call for the settings the first left unfinished: commit the first call's JSON, then
# UCI_ARGS="... --merge --datasets SETS") the committed file is its starting point.
if [[ " $UCI_ARGS " == *" --merge "* ]]; then cp "benchmarks/results/$NAME.json" "$OUT/$NAME.json"; fi
rm -f "benchmarks/results/$NAME.json"
ln -s "$(cd "$OUT" && pwd)/$NAME.json" "benchmarks/results/$NAME.json"
{ nproc; uptime; } > "$OUT/machine.txt"
status=0
"$PYTHON" -m benchmarks.bench_multiclass_uci $UCI_ARGS --name "$NAME" 2>&1 | tee "$OUT/bench_multiclass_uci.log" || status=${PIPESTATUS[0]}
rm "benchmarks/results/$NAME.json"
exit $status
