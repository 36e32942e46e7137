/* Telemetry's figures into the shared health table (windowed throughput and
 * latency per local NIC and direction), for the tuner and `rerail status`.
 *
 * HOOK: the health table (common/health/rr_health_table*) defines
 * rr_health_table_set_figures(). The reference is weak so that telemetry
 * links and runs where the table is not linked in (the `rerail` tool, unit
 * tests): there the call is skipped. A weak reference does not pull an
 * archive member in by itself; in the plugin the table's writer is linked
 * because the net core starts it. KEEP THIS PROTOTYPE IN STEP with
 * include/rerail/health_table.h / common/health/rr_health_table.h. */
#include "rr_tel_internal.h"

void rr_health_table_set_figures(int dev, int dir, double bytes_per_s, uint64_t p50_ns, uint64_t p99_ns)
    __attribute__((weak));

void rr_tel_feed_health_table(int dev, int dir, double bytes_per_s, uint64_t p50_ns, uint64_t p99_ns) {
  if (rr_health_table_set_figures) rr_health_table_set_figures(dev, dir, bytes_per_s, p50_ns, p99_ns);
}
