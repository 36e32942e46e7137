/* Transitional: rr_health.c was split into the health event bus
 * (rr_health_bus.h) and the NIC-state store (rr_nic_state.h). Kept only for
 * net_plugin/core/conn_setup.c, which another change is renaming now; delete
 * this header when that file includes rr_nic_state.h instead. */
#ifndef RERAIL_COMMON_HEALTH_H
#define RERAIL_COMMON_HEALTH_H
#include "rr_health_bus.h"
#endif
