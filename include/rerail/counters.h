/* The net plugin's process-wide event counters, for test programs.
 *
 * libnccl-net-rerail.so exports rerailCounters_v1 next to its NCCL tables: a
 * program that dlopen()ed the plugin (the test harness) reads what happened
 * in its process (protocol violations refused, rollbacks, failovers, rails
 * reconnected...) without telemetry and without reading log text. The same
 * counters are in the telemetry .prom file with the rerail_ prefix
 * (docs/telemetry.md lists them).
 *
 * rerailCounters_v1(buf, len) writes one "name value\n" line per counter
 * (name: [a-z_]+ ending in _total, and for a member of a family counted by
 * one label "{label=value}" after it, e.g.
 * listener_refusals_total{reason=wrong_secret}, no quotes, no spaces;
 * value: decimal, never decreasing; a count is an integer, a time (a name
 * ending in _seconds_total) is in seconds and may have a fraction, e.g.
 * 1.250) and
 * returns the length written, or -1 when len is too small; 4096 bytes always
 * suffice. New counters may be added under the same version, and a counter
 * may become a family (protocol_violations_total did, by kind): a reader
 * looks names up, sums a family's members for its total, and must not rely
 * on the order or number of lines. */
#ifndef RERAIL_COUNTERS_H
#define RERAIL_COUNTERS_H
#include <stddef.h>

#define RERAIL_COUNTERS_SYMBOL "rerailCounters_v1"
#define RERAIL_COUNTERS_MAX_TEXT 4096
typedef int rerail_counters_v1_fn(char *buf, size_t len);

#endif
