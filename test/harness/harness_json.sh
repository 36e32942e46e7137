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

# hcount LOG NAME: counter NAME (e.g. failovers_total) from the "plugin
# counters:" line of a text summary in LOG; "?" when absent. A family's name
# without its label (protocol_violations_total) is the sum of its members;
# one member is named as the summary writes it (protocol_violations_total{kind=key}).
# Tests decide on these, never on log wording.
hcount() {
  awk -v n="$2" '/^  plugin counters:/ { v = ""
                   for (i = 3; i < NF; i += 2)
                     if ($i == n || (index(n, "{") == 0 && index($i, n "{") == 1)) v += $(i + 1) }
                 END { print (v == "" ? "?" : v) }' "$1" 2>/dev/null || echo "?"
}
