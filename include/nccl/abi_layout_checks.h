/* Compile-time proof that rerail's ABI declarations match NCCL's layouts.
 *
 * NCCL reads our tables and property structs through its own declarations:
 * a field one slot off is silent memory corruption, not a compile error. So
 * every size and every offset below is written out as a number, derived by
 * hand from the field lists for LP64 (x86-64; aarch64 lays these out the
 * same) and cross-checked once against NCCL's own headers. Every ABI shim
 * includes this file: a wrong layout fails the build. */
#ifndef RERAIL_NCCL_ABI_LAYOUT_CHECKS_H
#define RERAIL_NCCL_ABI_LAYOUT_CHECKS_H
#include <stddef.h>

#include "nccl_common.h"
#include "net_v7.h"
#include "net_v8.h"
#include "net_v9.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "profiler_net.h"
#include "tuner_v2.h"
#include "tuner_v3.h"
#include "tuner_v4.h"
#include "tuner_v5.h"
#include "tuner_v6.h"

#if !defined(__LP64__) || !(defined(__x86_64__) || defined(__aarch64__))
#error "rerail's NCCL ABI layouts are checked for LP64 x86-64/aarch64 only"
#endif

#define RR_ABI_SIZE(type, bytes) \
  _Static_assert(sizeof(type) == (bytes), "sizeof(" #type ") must be " #bytes)
#define RR_ABI_AT(type, field, off) \
  _Static_assert(offsetof(type, field) == (off), #type "." #field " must be at byte " #off)
/* Function tables: entry i (name is entry 0) sits at i pointers. */
#define RR_ABI_SLOT(type, field, i) RR_ABI_AT(type, field, (i) * 8)

/* ---- Common ------------------------------------------------------------- */
RR_ABI_SIZE(nccl_result_t, 4);
RR_ABI_SIZE(nccl_log_level_t, 4);
RR_ABI_SIZE(nccl_net_device_type_t, 4);
RR_ABI_SIZE(nccl_func_t, 4);
RR_ABI_SIZE(nccl_logger_t, 8);
RR_ABI_SIZE(nccl_profiler_cb_t, 8);
_Static_assert(NCCL_RESULT_REMOTE_ERROR == 6 && NCCL_RESULT_TIMEOUT == 8, "result codes");
_Static_assert(NCCL_SUBSYS_NET == 0x10 && NCCL_SUBSYS_TUNING == 0x40, "subsystem bits");
_Static_assert(NCCL_FUNC_ALL_REDUCE == 4 && NCCL_FUNC_GATHER == 10, "function ids");

RR_ABI_SIZE(nccl_net_device_handle_t, 32);
RR_ABI_AT(nccl_net_device_handle_t, net_device_type, 0);
RR_ABI_AT(nccl_net_device_handle_t, net_device_version, 4);
RR_ABI_AT(nccl_net_device_handle_t, handle, 8);
RR_ABI_AT(nccl_net_device_handle_t, size, 16);
RR_ABI_AT(nccl_net_device_handle_t, needs_proxy_progress, 24);

/* ---- Net properties ----------------------------------------------------- */
/* v7 has neither reg_is_global nor force_flush: everything after ptr_support
 * sits 4 bytes earlier than in v8. */
RR_ABI_SIZE(nccl_net_props_v7_t, 56);
RR_ABI_AT(nccl_net_props_v7_t, name, 0);
RR_ABI_AT(nccl_net_props_v7_t, pci_path, 8);
RR_ABI_AT(nccl_net_props_v7_t, guid, 16);
RR_ABI_AT(nccl_net_props_v7_t, ptr_support, 24);
RR_ABI_AT(nccl_net_props_v7_t, speed, 28);
RR_ABI_AT(nccl_net_props_v7_t, port, 32);
RR_ABI_AT(nccl_net_props_v7_t, latency, 36);
RR_ABI_AT(nccl_net_props_v7_t, max_comms, 40);
RR_ABI_AT(nccl_net_props_v7_t, max_recvs, 44);
RR_ABI_AT(nccl_net_props_v7_t, net_device_type, 48);
RR_ABI_AT(nccl_net_props_v7_t, net_device_version, 52);

/* Fields shared by v8 and later up to net_device_version. v8 lacks
 * force_flush, so everything after reg_is_global sits 4 bytes earlier. */
RR_ABI_SIZE(nccl_net_props_v8_t, 64);
RR_ABI_AT(nccl_net_props_v8_t, name, 0);
RR_ABI_AT(nccl_net_props_v8_t, pci_path, 8);
RR_ABI_AT(nccl_net_props_v8_t, guid, 16);
RR_ABI_AT(nccl_net_props_v8_t, ptr_support, 24);
RR_ABI_AT(nccl_net_props_v8_t, reg_is_global, 28);
RR_ABI_AT(nccl_net_props_v8_t, speed, 32);
RR_ABI_AT(nccl_net_props_v8_t, port, 36);
RR_ABI_AT(nccl_net_props_v8_t, latency, 40);
RR_ABI_AT(nccl_net_props_v8_t, max_comms, 44);
RR_ABI_AT(nccl_net_props_v8_t, max_recvs, 48);
RR_ABI_AT(nccl_net_props_v8_t, net_device_type, 52);
RR_ABI_AT(nccl_net_props_v8_t, net_device_version, 56);

/* v9, v10 and v11 share the head; vprops holds 1 + 4 ints. */
#define RR_ABI_PROPS_V9_HEAD(T)          \
  RR_ABI_AT(T, name, 0);                 \
  RR_ABI_AT(T, pci_path, 8);             \
  RR_ABI_AT(T, guid, 16);                \
  RR_ABI_AT(T, ptr_support, 24);         \
  RR_ABI_AT(T, reg_is_global, 28);       \
  RR_ABI_AT(T, force_flush, 32);         \
  RR_ABI_AT(T, speed, 36);               \
  RR_ABI_AT(T, port, 40);                \
  RR_ABI_AT(T, latency, 44);             \
  RR_ABI_AT(T, max_comms, 48);           \
  RR_ABI_AT(T, max_recvs, 52);           \
  RR_ABI_AT(T, net_device_type, 56);     \
  RR_ABI_AT(T, net_device_version, 60);  \
  RR_ABI_AT(T, vprops, 64)

RR_ABI_SIZE(nccl_net_vdev_props_v9_t, 20);
RR_ABI_SIZE(nccl_net_vdev_props_v10_t, 20);
RR_ABI_SIZE(nccl_net_vdev_props_v11_t, 20);
RR_ABI_SIZE(nccl_net_vdev_props_v12_t, 36);
RR_ABI_AT(nccl_net_vdev_props_v9_t, devs, 4);
RR_ABI_AT(nccl_net_vdev_props_v12_t, devs, 4);

RR_ABI_SIZE(nccl_net_props_v9_t, 104);
RR_ABI_PROPS_V9_HEAD(nccl_net_props_v9_t);
RR_ABI_AT(nccl_net_props_v9_t, max_p2p_bytes, 88);
RR_ABI_AT(nccl_net_props_v9_t, max_coll_bytes, 96);

RR_ABI_SIZE(nccl_net_props_v10_t, 104);
RR_ABI_PROPS_V9_HEAD(nccl_net_props_v10_t);
RR_ABI_AT(nccl_net_props_v10_t, max_p2p_bytes, 88);
RR_ABI_AT(nccl_net_props_v10_t, max_coll_bytes, 96);

RR_ABI_SIZE(nccl_net_props_v11_t, 112);
RR_ABI_PROPS_V9_HEAD(nccl_net_props_v11_t);
RR_ABI_AT(nccl_net_props_v11_t, max_p2p_bytes, 88);
RR_ABI_AT(nccl_net_props_v11_t, max_coll_bytes, 96);
RR_ABI_AT(nccl_net_props_v11_t, max_multi_request_size, 104);

/* v12: vprops grows to 1 + 8 ints, pushing the size fields to 104. */
RR_ABI_SIZE(nccl_net_props_v12_t, 128);
RR_ABI_PROPS_V9_HEAD(nccl_net_props_v12_t);
RR_ABI_AT(nccl_net_props_v12_t, max_p2p_bytes, 104);
RR_ABI_AT(nccl_net_props_v12_t, max_coll_bytes, 112);
RR_ABI_AT(nccl_net_props_v12_t, max_multi_request_size, 120);
RR_ABI_AT(nccl_net_props_v12_t, rail_id, 124);
RR_ABI_AT(nccl_net_props_v12_t, plane_id, 126);

/* ---- Net config and attributes ------------------------------------------ */
RR_ABI_SIZE(nccl_net_comm_config_v10_t, 4);
RR_ABI_SIZE(nccl_net_comm_config_v11_t, 4);
RR_ABI_SIZE(nccl_net_comm_config_v12_t, 4);

#define RR_ABI_NET_ATTR(A, C)                       \
  RR_ABI_SIZE(C, 16);                               \
  RR_ABI_AT(C, max_concurrent_peers, 0);            \
  RR_ABI_AT(C, min_concurrent_peers, 4);            \
  RR_ABI_AT(C, max_flows_per_peer, 8);              \
  RR_ABI_AT(C, min_flows_per_peer, 12);             \
  RR_ABI_SIZE(A, 44);                               \
  RR_ABI_AT(A, send, 0);                            \
  RR_ABI_AT(A, recv, 16);                           \
  RR_ABI_AT(A, op, 32);                             \
  RR_ABI_AT(A, algo, 36);                           \
  RR_ABI_AT(A, proto, 40)
RR_ABI_NET_ATTR(nccl_net_attr_v11_t, nccl_net_comm_attr_v11_t);
RR_ABI_NET_ATTR(nccl_net_attr_v12_t, nccl_net_comm_attr_v12_t);

/* ---- Net tables --------------------------------------------------------- */
/* Entries 0..18 keep their places from v7 to v12. */
#define RR_ABI_NET_SLOTS(T)             \
  RR_ABI_SLOT(T, name, 0);              \
  RR_ABI_SLOT(T, init, 1);              \
  RR_ABI_SLOT(T, devices, 2);           \
  RR_ABI_SLOT(T, get_properties, 3);    \
  RR_ABI_SLOT(T, listen, 4);            \
  RR_ABI_SLOT(T, connect, 5);           \
  RR_ABI_SLOT(T, accept, 6);            \
  RR_ABI_SLOT(T, reg_mr, 7);            \
  RR_ABI_SLOT(T, reg_mr_dmabuf, 8);     \
  RR_ABI_SLOT(T, dereg_mr, 9);          \
  RR_ABI_SLOT(T, isend, 10);            \
  RR_ABI_SLOT(T, irecv, 11);            \
  RR_ABI_SLOT(T, iflush, 12);           \
  RR_ABI_SLOT(T, test, 13);             \
  RR_ABI_SLOT(T, close_send, 14);       \
  RR_ABI_SLOT(T, close_recv, 15);       \
  RR_ABI_SLOT(T, close_listen, 16);     \
  RR_ABI_SLOT(T, get_device_mr, 17);    \
  RR_ABI_SLOT(T, irecv_consumed, 18)

RR_ABI_SIZE(nccl_net_v7_t, 19 * 8);
RR_ABI_NET_SLOTS(nccl_net_v7_t);

RR_ABI_SIZE(nccl_net_v8_t, 19 * 8);
RR_ABI_NET_SLOTS(nccl_net_v8_t);

RR_ABI_SIZE(nccl_net_v9_t, 20 * 8);
RR_ABI_NET_SLOTS(nccl_net_v9_t);
RR_ABI_SLOT(nccl_net_v9_t, make_vdevice, 19);

RR_ABI_SIZE(nccl_net_v10_t, 20 * 8);
RR_ABI_NET_SLOTS(nccl_net_v10_t);
RR_ABI_SLOT(nccl_net_v10_t, make_vdevice, 19);

RR_ABI_SIZE(nccl_net_v11_t, 22 * 8);
RR_ABI_NET_SLOTS(nccl_net_v11_t);
RR_ABI_SLOT(nccl_net_v11_t, make_vdevice, 19);
RR_ABI_SLOT(nccl_net_v11_t, finalize, 20);
RR_ABI_SLOT(nccl_net_v11_t, set_net_attr, 21);

RR_ABI_SIZE(nccl_net_v12_t, 22 * 8);
RR_ABI_NET_SLOTS(nccl_net_v12_t);
RR_ABI_SLOT(nccl_net_v12_t, make_vdevice, 19);
RR_ABI_SLOT(nccl_net_v12_t, finalize, 20);
RR_ABI_SLOT(nccl_net_v12_t, set_net_attr, 21);

/* ---- Net profiler descriptors ------------------------------------------- */
/* The union after `type` holds 8-byte fields, so it starts at byte 8. */
RR_ABI_SIZE(nccl_profiler_net_sock_descr_v1_t, 24);
RR_ABI_AT(nccl_profiler_net_sock_descr_v1_t, type, 0);
RR_ABI_AT(nccl_profiler_net_sock_descr_v1_t, sock.fd, 8);
RR_ABI_AT(nccl_profiler_net_sock_descr_v1_t, sock.op, 12);
RR_ABI_AT(nccl_profiler_net_sock_descr_v1_t, sock.length, 16);

RR_ABI_SIZE(nccl_profiler_net_ib_descr_v1_t, 40);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, type, 0);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, qp.device, 8);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, qp.wr_id, 16);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, qp.opcode, 24);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, qp.qp_num, 28);
RR_ABI_AT(nccl_profiler_net_ib_descr_v1_t, qp.length, 32);
_Static_assert(NCCL_PROFILER_NET_TYPE_IB == 0x10000u && NCCL_PROFILER_NET_TYPE_SOCK == 0x20000u,
               "profiler plugin types");

/* ---- Tuner -------------------------------------------------------------- */
#define RR_ABI_TUNER_SLOTS(T, last)   \
  RR_ABI_SIZE(T, 4 * 8);              \
  RR_ABI_SLOT(T, name, 0);            \
  RR_ABI_SLOT(T, init, 1);            \
  RR_ABI_SLOT(T, get_coll_info, 2);   \
  RR_ABI_SLOT(T, last, 3)
RR_ABI_TUNER_SLOTS(nccl_tuner_v2_t, destroy);
RR_ABI_TUNER_SLOTS(nccl_tuner_v3_t, destroy);
RR_ABI_TUNER_SLOTS(nccl_tuner_v4_t, destroy);
RR_ABI_TUNER_SLOTS(nccl_tuner_v5_t, finalize);

RR_ABI_SIZE(nccl_tuner_v6_t, 5 * 8);
RR_ABI_SLOT(nccl_tuner_v6_t, name, 0);
RR_ABI_SLOT(nccl_tuner_v6_t, init, 1);
RR_ABI_SLOT(nccl_tuner_v6_t, get_coll_info, 2);
RR_ABI_SLOT(nccl_tuner_v6_t, finalize, 3);
RR_ABI_SLOT(nccl_tuner_v6_t, get_chunk_size, 4);

RR_ABI_SIZE(nccl_nvl_domain_info_v5_t, 12);
RR_ABI_AT(nccl_nvl_domain_info_v5_t, min_ranks_per_domain, 4);
RR_ABI_AT(nccl_nvl_domain_info_v5_t, max_ranks_per_domain, 8);

/* Doubles: base 7x3 = 21, hw 3x7x3 = 63, then five 4x3 = 12 tables. */
RR_ABI_SIZE(nccl_tuner_constants_v5_t, (21 + 63 + 5 * 12) * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, base_latencies, 0);
RR_ABI_AT(nccl_tuner_constants_v5_t, hw_latencies, 21 * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, ll_max_bws, 84 * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, per_ch_max_ring_ll128_bws, 96 * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, per_ch_max_tree_ll128_bws, 108 * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, per_ch_max_tree_bws, 120 * 8);
RR_ABI_AT(nccl_tuner_constants_v5_t, per_ch_max_nvls_tree_bws, 132 * 8);

#undef RR_ABI_PROPS_V9_HEAD
#undef RR_ABI_NET_ATTR
#undef RR_ABI_NET_SLOTS
#undef RR_ABI_TUNER_SLOTS
#undef RR_ABI_SLOT
#undef RR_ABI_AT
#undef RR_ABI_SIZE

#endif
