# shellcheck shell=bash
# Sourced by the fault tests that read the harness's JSON summaries
# (test/integration/resilience_lib.sh, test/lab/rxe/verbs_faults.sh).

# jget FILE PYEXPR: a value from a harness JSON summary (d = the object); "?" when absent.
jget() {
  python3 - "$1" "$2" <<'EOF' 2>/dev/null || echo "?"
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    v = eval(sys.argv[2], {}, {"d": d})
except Exception:
    v = None
if v is None:
    print("?")
elif isinstance(v, float):
    print("%.3f" % v)
else:
    print(v)
EOF
}
