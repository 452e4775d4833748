#!/usr/bin/env bash
# `lardon cc` and the cluster's per-task overhead (docs/DESIGN.md §14), every
# peer started by this script in the same run, on this machine:
#   1. a generated C project (N files, each a few non-trivial functions, one
#      header, a Makefile) built four ways, each from `make clean`:
#        plain `make -j J`;
#        `make -j J CC="lardon cc gcc"` through a fresh broker (empty cache)
#          and two local agents (one token each);
#        the same again: every compile is a cache hit;
#        `make -j J CC="distcc gcc"` with two local distccd (one job each);
#      each build's program is run and must print the same number;
#   2. the per-task overhead of the cluster: a routed no-op (`true` through
#      broker + agent) against a direct gRPC round trip (the floor) and
#      against starting `true` locally (lardon-bench's cluster_overhead).
# The agents admit against a simulated 8 GiB / 2-CPU host, so that the
# machine's other load does not make them wait; compiles really run.
# Not part of CI. Usage: scripts/bench-cc.sh [--files N] [--jobs J]
#                         [--iterations I] [--debug]
# (--debug: the dev build, to check the script, not to measure.)
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=200
JOBS=2
ITERATIONS=500
PROFILE=release
while [ $# -gt 0 ]; do
  case "$1" in
    --files) FILES=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --iterations) ITERATIONS=$2; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

need() { command -v "$1" >/dev/null 2>&1; }
if ! need distccd; then
  echo "installing distcc (Debian package)…" >&2
  apt-get update -qq >/dev/null && apt-get install -y -qq distcc >/dev/null
fi
need gcc && need make || { echo "bench-cc needs gcc and make" >&2; exit 1; }

echo "building lardon and cluster_overhead ($PROFILE)…" >&2
if [ "$PROFILE" = release ]; then
  cargo build --release -q -p lardon-cli -p lardon-bench --bin lardon --bin cluster_overhead
else
  cargo build -q -p lardon-cli -p lardon-bench --bin lardon --bin cluster_overhead
fi
LARDON=$PWD/target/$PROFILE/lardon
OVERHEAD=$PWD/target/$PROFILE/cluster_overhead
WORK=$(mktemp -d)
# BENCH_KEEP=1 keeps the work directory (logs, project) for a look.
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${BENCH_KEEP:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"' EXIT

now_ns() { date +%s%N; }
secs() { awk -v ns="$1" 'BEGIN { printf "%.1f", ns / 1e9 }'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- project
PROJ=$WORK/proj
mkdir -p "$PROJ/src" "$PROJ/include"
python3 - "$PROJ" "$FILES" <<'EOF'
import sys, os
proj, n = sys.argv[1], int(sys.argv[2])
with open(os.path.join(proj, "include/common.h"), "w") as h:
    h.write("#ifndef COMMON_H\n#define COMMON_H\n#include <stddef.h>\n#include <stdint.h>\n")
    h.write("#include <string.h>\n#include <stdlib.h>\n#include <math.h>\n")
    h.write("typedef struct { double x, y, z; } vec3;\n")
    h.write("typedef struct { int state; uint64_t acc; } machine;\n")
    for i in range(n):
        h.write(f"uint64_t f{i:03}_run(uint32_t seed);\n")
    h.write("#endif\n")
for i in range(n):
    k = 7 + i % 13
    with open(os.path.join(proj, f"src/f{i:03}.c"), "w") as c:
        c.write(f'''#include "common.h"

/* A {k}x{k} matrix product, unrolled and vectorised at -O2. */
static void mat_mul_{i}(const double *a, const double *b, double *out) {{
    for (int r = 0; r < {k}; r++)
        for (int col = 0; col < {k}; col++) {{
            double s = 0;
            for (int j = 0; j < {k}; j++) s += a[r * {k} + j] * b[j * {k} + col];
            out[r * {k} + col] = s;
        }}
}}

/* Quicksort on a small array. */
static void sort_{i}(uint32_t *v, int lo, int hi) {{
    while (lo < hi) {{
        uint32_t p = v[(lo + hi) / 2];
        int a = lo, b = hi;
        while (a <= b) {{
            while (v[a] < p) a++;
            while (v[b] > p) b--;
            if (a <= b) {{ uint32_t t = v[a]; v[a] = v[b]; v[b] = t; a++; b--; }}
        }}
        if (b - lo < hi - a) {{ sort_{i}(v, lo, b); lo = a; }} else {{ sort_{i}(v, a, hi); hi = b; }}
    }}
}}

/* FNV-1a over a generated string. */
static uint64_t hash_{i}(const char *s, size_t n) {{
    uint64_t h = 1469598103934665603ULL ^ {i}u;
    for (size_t j = 0; j < n; j++) {{ h ^= (unsigned char)s[j]; h *= 1099511628211ULL; }}
    return h;
}}

/* A small state machine. */
static void step_{i}(machine *m, uint32_t input) {{
    switch ((m->state + input) % 5) {{
    case 0: m->acc += input * {i + 3}u; m->state = 2; break;
    case 1: m->acc ^= m->acc << 7; m->state = 4; break;
    case 2: m->acc -= input; m->state = 1; break;
    case 3: m->acc = m->acc * 31 + {k}; m->state = 0; break;
    default: m->acc += (uint64_t)sqrt((double)(input + {i})); m->state = 3; break;
    }}
}}

static vec3 cross_{i}(vec3 a, vec3 b) {{
    vec3 r = {{ a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x }};
    return r;
}}

uint64_t f{i:03}_run(uint32_t seed) {{
    double a[{k * k}], b[{k * k}], out[{k * k}];
    for (int j = 0; j < {k * k}; j++) {{ a[j] = (seed + j) % 17; b[j] = (seed * j) % 13; }}
    mat_mul_{i}(a, b, out);
    uint32_t v[64];
    for (int j = 0; j < 64; j++) v[j] = (seed * 2654435761u) ^ (j * {i + 1}u);
    sort_{i}(v, 0, 63);
    char text[96];
    for (int j = 0; j < 95; j++) text[j] = (char)('a' + (seed + j * {i + 1}) % 26);
    text[95] = 0;
    machine m = {{ 0, seed }};
    for (int j = 0; j < 64; j++) step_{i}(&m, v[j]);
    vec3 c = cross_{i}((vec3){{ out[0], out[1], out[2] }}, (vec3){{ 1.0, 2.0, {i}.0 }});
    return hash_{i}(text, strlen(text)) ^ m.acc ^ (uint64_t)fabs(c.x + c.y + c.z) ^ v[{i} % 64];
}}
''')
with open(os.path.join(proj, "src/main.c"), "w") as c:
    c.write('#include <stdio.h>\n#include "common.h"\nint main(void) {\n    uint64_t s = 0;\n')
    for i in range(n):
        c.write(f"    s ^= f{i:03}_run({i}u) + {i}u;\n")
    c.write('    printf("%llu\\n", (unsigned long long)s);\n    return 0;\n}\n')
with open(os.path.join(proj, "Makefile"), "w") as m:
    m.write('''CC ?= gcc
CFLAGS ?= -O2 -Wall
SRCS := $(wildcard src/*.c)
OBJS := $(SRCS:.c=.o)

prog: $(OBJS)
\t$(CC) $(CFLAGS) -o $@ $(OBJS) -lm

src/%.o: src/%.c include/common.h
\t$(CC) $(CFLAGS) -Iinclude -c $< -o $@

clean:
\trm -f $(OBJS) prog
''')
EOF

# One timed build from clean; prints seconds; keeps the program's output
# in $WORK/out-LABEL (compared once every build is done).
build() { # $1 = label, rest = extra make arguments
  local label=$1; shift
  make -s -C "$PROJ" clean
  local t0; t0=$(now_ns)
  make -s -C "$PROJ" -j "$JOBS" "$@" >"$WORK/make-$label.log" 2>&1 || {
    echo "build '$label' failed; see below" >&2; tail -20 "$WORK/make-$label.log" >&2; exit 1; }
  local t1; t1=$(now_ns)
  "$PROJ/prog" >"$WORK/out-$label"
  secs $((t1 - t0))
}

# ---------------------------------------------------------------- peers
CAP="gcc@$(gcc -dumpversion):$(gcc -dumpmachine)"
BROKER=127.0.0.1:$(free_port)
"$LARDON" broker --listen "$BROKER" --heartbeat 1s >"$WORK/broker.log" 2>&1 &
for a in 1 2; do
  "$LARDON" agent --broker "$BROKER" --id "agent-$a" --capability "$CAP" --tokens 1 \
    --simulate-host 8GiB,2 --heartbeat 1s --work-dir "$WORK/agent-work" >"$WORK/agent-$a.log" 2>&1 &
done
for _ in $(seq 600); do
  n=$("$LARDON" cluster status --broker "$BROKER" --json 2>/dev/null \
      | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["agents"]))' 2>/dev/null || echo 0)
  [ "$n" = 2 ] && break; sleep 0.1
done
[ "$n" = 2 ] || { echo "the agents did not connect:" >&2; tail -n 5 "$WORK"/broker.log "$WORK"/agent-*.log >&2; exit 1; }

mkdir -p "$WORK/distcc"
DHOSTS=""
for _ in 1 2; do
  p=$(free_port)
  distccd --daemon --no-detach --allow 127.0.0.1 --listen 127.0.0.1 --port "$p" --jobs 1 \
    --log-stderr --log-level info 2>"$WORK/distccd-$p.log" &
  DHOSTS="$DHOSTS 127.0.0.1:$p/1"
done
sleep 0.5

# ---------------------------------------------------------------- builds
echo "building $FILES files with make -j $JOBS on $(nproc) CPUs (load: $(cut -d' ' -f1-3 /proc/loadavg))…" >&2
PLAIN=$(build plain)
# Counted from the broker's answers: a local fallback would not show.
answered() { "$LARDON" cluster status --broker "$BROKER" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["finished"])'; }
LARDON_COLD=$(LARDON_BROKER=$BROKER build lardon-cold CC="$LARDON cc gcc")
COLD_N=$(answered)
LARDON_HIT=$(LARDON_BROKER=$BROKER build lardon-hit CC="$LARDON cc gcc")
HIT_N=$(( $(answered) - COLD_N ))
DISTCC=$(DISTCC_HOSTS="$DHOSTS" DISTCC_DIR="$WORK/distcc" build distcc CC="distcc gcc")
DISTCC_N=$(cat "$WORK"/distccd-*.log | grep -c "COMPILE_OK" || true)

for label in lardon-cold lardon-hit distcc; do
  cmp -s "$WORK/out-plain" "$WORK/out-$label" || {
    echo "the $label build's program printed $(cat "$WORK/out-$label"), not $(cat "$WORK/out-plain")" >&2; exit 1; }
done

echo
echo "| build ($FILES files + main, make -j $JOBS) | wall | through the peers |"
echo "|---|---|---|"
echo "| plain \`make\` | ${PLAIN} s | – |"
echo "| \`CC=\"lardon cc gcc\"\`, empty cache | ${LARDON_COLD} s | $COLD_N compiles answered by the broker |"
echo "| \`CC=\"lardon cc gcc\"\` again (cache hits) | ${LARDON_HIT} s | $HIT_N compiles answered by the broker |"
echo "| \`CC=\"distcc gcc\"\` | ${DISTCC} s | $DISTCC_N compiles done by distccd |"
echo
"$OVERHEAD" "$ITERATIONS"
