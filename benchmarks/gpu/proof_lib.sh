# Helpers the GPU proof scripts source: set STAGES, SUMMARY (a file, emptied by the caller) and HERE
# (the tree under test) first.
say() { echo "$*" | tee -a "$SUMMARY"; }
stage() { [[ " $STAGES " == *" $1 "* ]]; }
# zgate BASELINE CURRENT: the per-bucket gate at zero tolerance; its output in CURRENT.gate.
zgate() {  # baseline current [more gate options]
  PYTHONPATH=$HERE python3 -m bcgprof gate --baseline "$1" --current "$2" --each-bucket --rel-tol 0 --abs-tol-mib 0 \
    "${@:3}" >"$2.gate" 2>&1
  say "zero-tolerance gate $2 against $1: exit $?"; head -n 2 "$2.gate" | tee -a "$SUMMARY"
}
