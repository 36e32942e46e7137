/* rerail's own exports beyond NCCL's tables (include/rerail/): what a test
 * program asks the plugin it loaded without reading log text. A plugin that
 * exports none (another plugin, NCCL's own transport) answers -1. */
#include "net_api.h"
#include "rerail/conn_id.h"
#include "rerail/counters.h"

#include <dlfcn.h>
#include <string.h>

int hnet_plugin_counters(const hnet *n, char *buf, size_t len) {
  if (!n->dl || !buf) return -1;
  void *sym = dlsym(n->dl, RERAIL_COUNTERS_SYMBOL);
  if (!sym) return -1;
  rerail_counters_v1_fn *fn;
  memcpy(&fn, &sym, sizeof fn); /* ISO C has no object-to-function pointer cast */
  return fn(buf, len);
}

int hnet_conn_id(const hnet *n, const void *comm, uint64_t *id) {
  if (!n->dl || !comm || !id) return -1;
  void *sym = dlsym(n->dl, RERAIL_CONN_ID_SYMBOL);
  if (!sym) return -1;
  rerail_conn_id_v1_fn *fn;
  memcpy(&fn, &sym, sizeof fn);
  return fn(comm, id);
}
