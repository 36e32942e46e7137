/* rerailConnId_v1: a comm's connection id for test programs
 * (include/rerail/conn_id.h). Exported by abi/exports.map. */
#include "net_core.h"
#include "rerail/conn_id.h"

__attribute__((visibility("default"))) rerail_conn_id_v1_fn rerailConnId_v1;

int rerailConnId_v1(const void *comm, uint64_t *id) {
  if (!id) return -1;
  return rr_net_conn_id(comm, id) == RR_OK ? 0 : -1;
}
