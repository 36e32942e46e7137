/* rerailCounters_v1: the process-wide counters for test programs
 * (include/rerail/counters.h). Exported by abi/exports.map. */
#include "rerail/counters.h"
#include "rr_counters.h"

__attribute__((visibility("default"))) rerail_counters_v1_fn rerailCounters_v1;

int rerailCounters_v1(char *buf, size_t len) {
  if (!buf) return -1;
  return rr_counters_format(buf, len);
}
