# shellcheck shell=bash
# Sourced by the tests that read the harness's summaries (JSON: resilience_lib.sh,
# verbs_faults.sh; text: harness_lib.sh, verbs_harness.sh). No side effects.

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

# hcount LOG NAME: counter NAME (e.g. protocol_violations_total) from the
# "plugin counters:" line of a text summary in LOG; "?" when absent. Tests
# decide on these, never on log wording.
hcount() {
  awk -v n="$2" '/^  plugin counters:/ { for (i = 3; i < NF; i += 2) if ($i == n) v = $(i + 1) }
                 END { print (v == "" ? "?" : v) }' "$1" 2>/dev/null || echo "?"
}
