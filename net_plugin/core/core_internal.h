/* Objects behind NCCL's opaque pointers, shared by the core's files. */
#ifndef RERAIL_CORE_INTERNAL_H
#define RERAIL_CORE_INTERNAL_H
#include <pthread.h>
#include <stdint.h>

#include "engine.h"
#include "handle.h"
#include "rail_tcp.h"
#include "rail_verbs.h"
#include "net_core.h"
#include "rr_netif.h"

/* Magic numbers at the head of every object NCCL holds, so a stale or foreign
 * pointer is reported instead of followed. */
#define RR_MAGIC_SEND 0x52525353u
#define RR_MAGIC_RECV 0x52525352u
#define RR_MAGIC_LISTEN 0x5252534cu
#define RR_MAGIC_MR 0x52524d52u
#define RR_MAGIC_DEAD 0xdeadbeefu

struct rr_net_ctx {
  uint64_t comm_id;
  int traffic_class;
  rr_profiler_fn profiler;
  int tel_held;              /* holds a reference on the telemetry exporter */
};

/* Process-wide: the devices (NICs) rerail pools, each opened by the
 * transport that serves it. */
typedef struct rr_devices {
  int count;
  rr_netif nif[RR_MAX_NETIFS];
  rr_rail_dev *rail[RR_MAX_NETIFS];
  const rr_verbs_port *verbs[RR_MAX_NETIFS]; /* the RDMA port behind a verbs device, else NULL */
} rr_devices;

const rr_devices *rr_core_devices(void);

/* transport.c: find the host's RDMA ports (once), and open device `index`
 * for a pooled NIC with the transport that serves it. */
void rr_core_transport_discover(void);
rr_status rr_core_dev_open(int index, const rr_netif *nif, rr_rail_dev **dev, const rr_verbs_port **vport);

/* An endpoint on device dev for engine e, connected with the peer's blob
 * and the setup sockets (taken over or closed, in every case: the fds are
 * set to -1). Goes through the device's transport, whichever it is. */
rr_status rr_core_ep_create(int dev, int *fds, int nfds, const void *peer_blob, uint32_t blob_len,
                            rr_engine *e, rr_rail_ep **ep);

/* The hello every data socket sends first (connector -> listener). Hellos
 * leave once every rail has connected or been left out, and carry the final
 * set of rails: a rail that could not connect is not part of the connection. */
#define RR_HELLO_MAGIC 0x32435252u /* "RRC2" */
#define RR_HELLO_VERSION 3 /* 3: reconnect hellos carry a generation */
#define RR_HELLO_ENDIAN 0x0102
typedef struct rr_hello {
  uint32_t magic;
  uint16_t version;
  uint16_t endian;
  uint64_t token;
  uint64_t conn_id;
  uint8_t rail;
  uint8_t stream;
  uint8_t nstreams;
  uint8_t flags;             /* RR_HELLO_RECONNECT */
  uint32_t chunk_size;
  uint32_t rails_mask;       /* the rails of this connection */
  /* Which attempt at this rail: 0 for the connection's first sockets, then
   * one more for each reconnect. The listener installs only an attempt newer
   * than the rail's current one, so a late hello of an abandoned attempt
   * (held up in a failed path's retransmissions) can never replace the
   * sockets both ends have moved on to. */
  uint32_t generation;
} rr_hello;
_Static_assert(sizeof(rr_hello) == 40, "hello is 40 bytes on the wire");
#define RR_HELLO_RECONNECT 0x1 /* flags: a rail of a live connection, reopened */

/* Connecting, as the connector side sees it: every planned rail and its
 * sockets. A send comm keeps this after connect() to reconnect a rail. */
enum { RAIL_PENDING = 0, RAIL_CONNECTED, RAIL_READY, RAIL_FAILED };

typedef struct connect_rail {
  int dev;                   /* local device */
  int peer_addr;             /* index into the handle's addresses */
  int status;
  uint64_t retry_at_ns;
  int fds[RR_TCP_MAX_STREAMS];
  uint8_t connected[RR_TCP_MAX_STREAMS];
  uint32_t hello_sent[RR_TCP_MAX_STREAMS];
  rr_hello hello[RR_TCP_MAX_STREAMS];
} connect_rail;

typedef struct connect_state {
  struct connect_state *next;
  const void *handle;        /* NCCL's handle buffer: our key between calls */
  uint64_t token;
  int nstreams;
  uint64_t start_ns;
  rr_peer_addrs peer;
  int nrails;
  connect_rail rails[RR_MAX_RAILS];
} connect_state;


struct rr_send_comm {
  uint32_t magic;
  int dev;
  rr_engine engine;
  connect_state conn;        /* the plan, for reconnecting a rail */
  uint32_t rails_mask;       /* planned rails that are part of the connection */
  int plan_of[RR_MAX_RAILS]; /* engine rail index -> planned rail index */
  int reconnecting[RR_MAX_RAILS];
  uint64_t attempt_start_ns[RR_MAX_RAILS]; /* when the current reconnect attempt began */
  uint64_t attempt_seen_ns[RR_MAX_RAILS];  /* when the engine last drove it */
  uint32_t generation[RR_MAX_RAILS];       /* by planned rail: the last attempt's number */
};

struct rr_recv_comm {
  uint32_t magic;
  int dev;
  rr_engine engine;
  uint64_t conn_id;
  uint32_t rails_mask;
  uint32_t generation[RR_MAX_RAILS]; /* by planned rail: the attempt in use (listener's lock) */
  struct rr_listen_comm *listen; /* keeps the listener for reconnects */
};

/* An accepted socket whose hello has not fully arrived. */
typedef struct pending_sock {
  int fd;
  uint64_t since_ns;
  uint32_t got;
  uint8_t hello[64];
  struct sockaddr_storage peer;
} pending_sock;

#define RR_LISTEN_PENDING 64
#define RR_LISTEN_GROUPS 16

/* Sockets of one connection arriving at a listener, by rail and stream. */
typedef struct pending_group {
  uint64_t conn_id;
  int reconnect_rail;        /* >= 0: sockets reopening that rail of a live connection */
  uint32_t generation;       /* reconnects: the attempt these sockets belong to */
  uint64_t since_ns;
  int nstreams;
  uint32_t chunk_size;
  uint32_t rails_mask;       /* known from the first hello; 0 before */
  int fds[RR_MAX_RAILS][RR_TCP_MAX_STREAMS];
} pending_group;

struct rr_listen_comm {
  uint32_t magic;
  rr_profiler_fn profiler;   /* the context's, for the comms it accepts */
  int dev;
  int fd;
  uint64_t token;
  pthread_mutex_t lock;
  pending_sock socks[RR_LISTEN_PENDING];
  int nsocks;
  pending_group groups[RR_LISTEN_GROUPS];
  int ngroups;
  /* The listener outlives NCCL's closeListen while connections it accepted
   * live: their senders reconnect failed rails through it. */
  int nccl_closed;
  int ncomms;
  rr_recv_comm *comms[RR_LISTEN_GROUPS];
};



/* Socket helpers (conn_setup.c). */
rr_status rr_sock_tune(int fd);

/* Device whose address is addr, or -1. */
int rr_core_dev_by_addr(const struct sockaddr_storage *addr);

/* The engine settings every new connection gets. */
void rr_core_engine_config(int role, size_t chunk_size, const struct sockaddr *peer,
                           rr_profiler_fn profiler, rr_engine_config *cfg);

/* Background thread (monitor.c): link-state events, and progress for
 * connections NCCL is not driving. */
void rr_monitor_add(rr_engine *e);
void rr_monitor_remove(rr_engine *e);
void rr_monitor_add_listener(rr_listen_comm *l);
void rr_monitor_remove_listener(rr_listen_comm *l);

/* Take new sockets on a listener NCCL no longer calls accept() on: hands
 * reconnected rails to their connections (conn_setup.c; monitor thread). */
void rr_listen_service(rr_listen_comm *l);
/* A receive comm is closing: let go of its listener (frees it when NCCL
 * closed it too). */
void rr_listen_release(rr_recv_comm *rc);

#endif
