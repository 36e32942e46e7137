/* Objects behind NCCL's opaque pointers, shared by the core's files. */
#ifndef RERAIL_CORE_INTERNAL_H
#define RERAIL_CORE_INTERNAL_H
#include <pthread.h>
#include <stdint.h>

#include "connect_job.h"
#include "connect_plan.h"
#include "devices.h"
/* The engine's internals, not only its API: every comm holds its engine by
 * value (rr_send_comm, rr_recv_comm), and the flush reads the rails of one
 * under its lock (flush.c). */
#include "engine_internal.h"
#include "handle.h"
#include "rail.h"
#include "net_core.h"
#include "rr_netif.h"
#include "setup_wire.h"

/* LOCKING (docs/locking.md has the map: who takes what, and why).
 *
 * Blocking order, outermost first; a thread holding one takes only later ones:
 *   1. core_lock | connect_lock | a listener's lock (never two of them at once)
 *   2. lifecycle_lock (monitor.c)   3. registry_lock -> incoming_lock (monitor.c)
 *   4. an engine's lock (never two engines at once)
 *   5. gray_lock (engine_gray.c)
 *   6. a connect job's lock, threads_lock (connect_job.c)
 *   7. a verbs device: gen_lock (rwlock) -> flush_lock -> its lock -> its mr cache's lock
 *   8. telemetry: life -> lock -> evq_lock
 *   9. proc_lock (health table) -> sinks_lock (rr_health) -> a sink's own (leaf) lock
 *   leaves: names_lock, the health table writer's lock, numa_lock, the tuner's lock
 * sinks_lock is reached from nearly every level (a health event is reported
 * under an engine's, gray, listener or core lock): a sink takes a leaf lock
 * only, never calls back into the plugin and never blocks.
 *
 * The exceptions are trylocks, on the monitor thread while it holds
 * registry_lock: a listener's lock (rr_listen_service: accept() takes
 * registry_lock under it, the one real inversion) and an engine's
 * (rr_engine_background: in order, but the monitor never waits behind
 * NCCL's thread). verbs_flush_poll's trylock only leaves a shared CQ to the
 * thread already polling it.
 *
 * Never held across a sleep or a connect that may block (a reopened rail
 * connects on a job thread), nor held by a caller of rr_monitor_remove (it
 * joins the monitor). ibv_reg_mr runs without the mr cache's lock; under
 * gen_lock (read) so the PD stays, and under an engine's lock once (its
 * bounce arena). Exception: a first connection's rails connect inside
 * NCCL's accept(), under that listener's lock; the monitor skips it then.
 *
 * Link-down events are polled, not pushed: each engine's 1 ms tick reads
 * rr_health_nic_get() per rail (2 ns a call; docs/locking.md says why a
 * push to the engines of a NIC is the worse trade). */

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


/* Where device dev's setup sockets go: the out-of-band address, or its own
 * address for a device whose setup sockets are its data path (*own_ip 1);
 * NULL when it has neither. */
const struct sockaddr_storage *rr_core_setup_addr(int dev, int *own_ip);

/* oob.c: the out-of-band interface among nifs (RERAIL_SOCKET_IFNAME's, or
 * NCCL's default choice); 0 when there is none. */
int rr_core_choose_oob(const rr_netif *nifs, int nnifs, const char *spec, rr_netif *out);

/* conn_listen.c: whether a and b hold the same IP address (ports aside). */
int rr_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b);


/* flush.c: test() of a request iflush returned. */
rr_status rr_core_flush_test(void *request, int *done);

/* transport.c: ask every transport for its devices and open them into
 * d->nif/d->rail[0..RR_MAX_NETIFS) (nifs: the interfaces RERAIL_SOCKET_IFNAME,
 * `spec`, leaves), noting in d->left what was left out; sets d->count. */
void rr_core_devices_open(const rr_netif *nifs, int nnifs, const char *spec, rr_devices *d);


/* Connecting, as the connector side sees it: every planned rail, its
 * endpoint and its setup sockets, each running the setup handshake
 * (setup_wire.h). A send comm keeps this after connect() to reconnect a rail.
 * Rail states (RAIL_*) and what connect does with them: connect_plan.h. */

/* One setup socket's handshake, connector side. Its buffers live on the
 * heap only while it runs: a send comm keeps its plan for good. */
enum { SS_CONNECTING = 0, SS_HELLO, SS_CHALLENGE, SS_PROOF, SS_ACCEPT, SS_DONE };
typedef struct setup_hs {
  uint16_t out_len, out_sent;
  uint16_t in_got;
  uint8_t hello[RR_HS_HELLO_LEN]; /* as sent: every keyed hash covers it */
  uint8_t snonce[RR_HS_NONCE_LEN];
  uint8_t out[RR_HS_MAX_LEN];
  uint8_t in[RR_HS_MAX_LEN];
} setup_hs;

typedef struct setup_stream {
  int fd;
  uint8_t state;             /* SS_* */
  setup_hs *hs;              /* while the handshake runs */
  uint64_t opened_ns;        /* when its socket began connecting */
  uint8_t ready;             /* rail_poll (conn_rail.c) saw it ready (or it is new): worth a step */
  uint32_t furthest;         /* connect(): the furthest it got, over its attempts (stream_reach) */
} setup_stream;

typedef struct connect_rail {
  int dev;                   /* local device */
  int peer_addr;             /* index into the handle's addresses */
  int status;                /* RAIL_* */
  uint8_t failed;            /* connect(): an attempt failed; it is retried until the connection goes on */
  uint8_t base;              /* of the first plan: kept for later when it cannot be reached */
  uint8_t unanswered;        /* connect(): attempts whose TCP connect got no answer (each waits longer) */
  uint8_t polled;            /* rr_conn_rails_poll has set its sockets' ready flags for the next advance */
  const char *why;           /* the last failure (a static string) */
  uint64_t retry_at_ns;
  uint32_t generation;       /* the attempt the hellos announce (0: first connection) */
  uint8_t resync;            /* the listener's floor says the next attempt is resync_floor + 1 */
  uint8_t lost;              /* a socket failed after the comm was handed out (conn_confirm.c) */
  uint32_t resync_floor;
  rr_rail_ep *ep;            /* opened through the rail's ops; connected once READY */
  uint16_t blob_len, peer_blob_len;
  uint8_t blob[RR_HS_BLOB_MAX];      /* our endpoint's address, sent in PROOF */
  uint8_t peer_blob[RR_HS_BLOB_MAX]; /* the listener's, from ACCEPT */
  setup_stream s[RR_HS_MAX_STREAMS];
} connect_rail;

typedef struct connect_state {
  const void *handle;        /* NCCL's handle buffer: our key between calls */
  uint8_t secret[RR_HS_SECRET_LEN];
  uint64_t conn_id;
  int nstreams;
  uint32_t chunk_size;
  uint64_t start_ns;          /* the attempt began: connect(), or its latest start over (the settle
                               * and patience bounds) */
  uint64_t last_call_ns;     /* NCCL's latest connect() call for it */
  /* Where connect()'s time went (rr_counters.h, connect_time_seconds_total):
   * its first call, the first rail up, the set of rails decided (0: not
   * yet); and whether it has waited with a rail up (counted once). */
  uint64_t began_ns, first_up_ns, decided_ns;
  uint8_t settle_counted;
  uint64_t progress;         /* counts setup sockets advancing (connected, sent, received) */
  rr_setup_clock deadline;   /* RERAIL_CONNECT_TIMEOUT, from the latest progress (connect_plan.h) */
  int peer_slot;             /* its peer process's shared progress while connect() runs (peer_progress.h); -1: none */
  rr_peer_addrs peer;
  int nrails;
  int want;                  /* backups wanted */
  int cand[RR_MAX_NETIFS];   /* local NICs in failover-chain order (known down last) ... */
  int ncand, cand_next;      /* ... and the next one to plan when a backup is short */
  int addr_used[RR_HANDLE_MAX_ADDRS]; /* the peer's addresses some rail is paired with */
  uint32_t rails_mask;       /* the rails up when the connection went on (0 before) */
  uint32_t later_mask;       /* ... and those that belong to it, to be reopened */
  int commit_rail;           /* the rail whose stream 0 carries COMMIT */
  uint8_t early;             /* COMMIT sent behind the PROOFs, before the ACCEPTs (conn_connect.c) */
  uint8_t early_broken;      /* ... and a socket failed since: the attempt starts over */
  uint8_t handed_out;        /* the comm went to NCCL ahead of its ACCEPTs: a rail planned from
                              * then on must connect without blocking (any thread installs it) */
  uint16_t commit_sent;
  uint8_t commit[RR_HS_COMMIT_LEN];
  connect_rail *rails;        /* nrails of them (grown as rails are planned) */
} connect_state;

struct rr_send_comm {
  uint32_t magic;            /* 0 while connect() is still setting it up */
  struct rr_send_comm *next_connecting;
  int dev;
  rr_engine engine;
  connect_state conn;        /* the plan; then for reconnecting a rail */
  uint32_t rails_mask;       /* planned rails that are part of the connection (up or later) */
  int plan_of[RR_MAX_RAILS]; /* engine rail index -> planned rail index */
  int reconnecting[RR_MAX_RAILS];
  uint64_t attempt_start_ns[RR_MAX_RAILS]; /* when the current reconnect attempt began */
  uint64_t attempt_seen_ns[RR_MAX_RAILS];  /* when the engine last drove it */
  uint32_t generation[RR_MAX_RAILS];       /* by planned rail: the last attempt's number */
  rr_connect_job *conn_job[RR_MAX_RAILS];  /* by engine rail: the reopened endpoint connecting */
  int commit_fd[RR_MAX_RAILS];             /* ... and its stream 0, for COMMIT once connected */
  /* Handed out behind its PROOFs and COMMIT, before the listener's ACCEPTs
   * (conn_confirm.c): no rail is in the engine yet. Read and written under
   * the confirm lock; the monitor reads it to know when to drive the engine. */
  _Atomic int confirming;
  rr_status confirm_status;  /* once confirming is 0: RR_OK, or why the connection failed */
  uint64_t restarted_ns;     /* the first start over behind NCCL's back (0: none) */
  uint64_t confirm_tried_ns; /* the monitor's latest try (rr_connect_confirm_background) */
  /* By planned rail: when the comm went out without it (deferred at setup:
   * a rail to reopen), until the reopened rail is installed (0: none). */
  uint64_t deferred_ns[RR_MAX_RAILS];
};

/* A send comm handed out before the listener's ACCEPTs (conn_confirm.c):
 * RR_OK once its rails are in its engine, RR_AGAIN while it waits, or the
 * connection's failure. Never blocks; the monitor and isend both call it. */
rr_status rr_connect_confirm(rr_send_comm *s);
/* The connection id of a send comm, which a start over may still change (conn_confirm.c). */
uint64_t rr_connect_conn_id(const rr_send_comm *s);
/* ... the same from the monitor, which must not wait on a lock: 1 while
 * the comm still waits (or the lock was busy). */
int rr_connect_confirm_background(rr_send_comm *s);
/* Closing a comm still waiting: take the ACCEPTs that are in (the listener
 * may have handed its end out, which expects an orderly close), wait for
 * none, and let it go either way. */
void rr_connect_confirm_close(rr_send_comm *s);

/* Release what a send comm's setup state holds (sockets and endpoints of
 * an attempt under way, the plan itself); its engine must be finished or
 * never started. */
void rr_connect_release(rr_send_comm *s);

struct rr_recv_comm {
  uint32_t magic;
  int dev;
  rr_engine engine;
  uint64_t conn_id;
  uint32_t rails_mask;       /* the connection's rails, up at setup or reopened later */
  uint32_t generation[RR_MAX_RAILS]; /* by planned rail: the attempt in use (listener's lock) */
  uint32_t gen_seen[RR_MAX_RAILS];   /* newest authenticated attempt (>= generation) */
  struct rr_listen_comm *listen; /* keeps the listener for reconnects */
};

/* An accepted socket that has not proved it holds the handle's secret.
 * These are what an unauthenticated peer can make us hold: few and small,
 * each until a newcomer needs its slot (listen_admit.c, "How long a
 * stranger is held"). */
enum { PS_HELLO = 0, PS_PROOF };
typedef struct pending_sock {
  int fd;
  uint8_t state;             /* PS_* */
  uint16_t got;
  uint32_t gen_floor;
  uint64_t waiting_ns;        /* its latest step: accepted, or its HELLO answered (idle longest goes first) */
  uint64_t partial_ns;        /* the first byte of a message not yet whole came then (0: none) */
  uint8_t readable;          /* this accept() call: bytes (or its end) came, or it is new */
  rr_hs_hello h;
  uint8_t hello[RR_HS_HELLO_LEN];
  uint8_t snonce[RR_HS_NONCE_LEN];
  uint8_t in[RR_HS_MAX_LEN];
  struct sockaddr_storage peer;
} pending_sock;

/* Unauthenticated sockets per listener (slots grow as they are used). */
#define RR_LISTEN_PENDING 128
/* ... of them from one address. Setup runs over the out-of-band interface,
 * so every rail and every retry of one peer process arrives from one
 * address: what a legitimate peer has in flight is its connections to this
 * listener times rails times streams, plus attempts it abandoned whose FIN
 * the listener has not read yet (it reads them on its next turn, which may
 * be a sweep away). 64 holds one attempt of the largest connection
 * (RR_MAX_RAILS x RR_HS_MAX_STREAMS), or 16 attempts at the defaults (2 rails
 * x 2 streams); the former 16 refused a peer at 256 connections. A lone
 * stranger still holds at most half the table: crowding it needs several
 * sources, as before. */
#define RR_LISTEN_PER_SOURCE (RR_MAX_RAILS * RR_HS_MAX_STREAMS)
_Static_assert(2 * RR_LISTEN_PER_SOURCE <= RR_LISTEN_PENDING, "a lone source holds at most half the table");
/* To complete a handshake message once its first byte came (listen_admit.c). */
#define RR_SETUP_AUTH_NS 1000000000ull
#define RR_LISTEN_GROUPS 16
#define RR_LISTEN_FDS RR_HANDLE_MAX_ADDRS
#define RR_LISTEN_WARN_SLOTS 32

/* Authenticated sockets of one connection arriving at a listener, by rail
 * and stream. */
typedef struct pending_group {
  uint64_t conn_id;
  int reconnect_rail;        /* >= 0: sockets reopening that rail of a live connection */
  uint32_t generation;       /* reconnects: the attempt these sockets belong to */
  uint64_t since_ns;
  uint64_t progress_ns;      /* its latest progress: a socket joined, COMMIT came, a rail ended */
  int nstreams;
  uint32_t chunk_size;
  uint32_t rails_mask;       /* from COMMIT (first connections) or the reconnect's rail; 0 before */
  uint32_t later_mask;       /* from COMMIT: rails the connector reopens once they work */
  uint8_t later_addr[RR_MAX_RAILS]; /* ... and the handle address each will reach */
  uint32_t lost_seen;        /* rails whose sockets were seen to end (read_commits) */
  uint32_t lost_mask;        /* of later_mask: rails committed, then lost here (on dev[r]) */
  int fds[RR_MAX_RAILS][RR_HS_MAX_STREAMS];
  int dev[RR_MAX_RAILS];     /* our device each rail arrived on */
  rr_rail_ep *ep[RR_MAX_RAILS];  /* our endpoint of each rail (its blob went out in ACCEPT) */
  uint16_t peer_blob_len[RR_MAX_RAILS];
  uint8_t peer_blob[RR_MAX_RAILS][RR_HS_BLOB_MAX];
  uint32_t frames_first;     /* rails whose stream 0 starts with data, not COMMIT (read_commits) */
  uint32_t readable;         /* rails whose stream 0 has bytes (or its end) this accept() call */
  rr_engine *engine;         /* the engine the endpoints report to */
  struct rr_recv_comm *rc;   /* first connections: the comm being built */
  rr_connect_job *install;   /* reconnects: the endpoint connecting before it is installed */
  char install_peer[48];     /* ... and the connector's address it reached (its rail is named by it) */
} pending_group;

/* One refusal reason from one source address, logged once a minute. */
typedef struct listen_warned {
  const char *why;
  uint8_t addr[16];
  uint64_t at_ns;
  uint32_t suppressed;
} listen_warned;

struct rr_listen_comm {
  uint32_t magic;
  rr_profiler_fn profiler;   /* the context's, for the comms it accepts */
  int traffic_class;         /* the context's, for the comms it accepts (-1: none) */
  int dev;
  int fds[RR_LISTEN_FDS];    /* one listening socket per distinct setup address of the handle */
  int nfds;
  int addr_dev[RR_HANDLE_MAX_ADDRS]; /* the device behind each of the handle's entries ... */
  struct sockaddr_storage entry_addr[RR_HANDLE_MAX_ADDRS]; /* ... and where its sockets arrive */
  int naddrs;
  uint8_t secret[RR_HS_SECRET_LEN];
  /* guards: every field below, and its comms' generation[]; taken by accept(), closeListen,
   * a recv comm's close and the monitor (trylock). Level 1: under it an engine's lock,
   * the monitor's registry, device and telemetry locks (docs/locking.md). */
  pthread_mutex_t lock;
  /* Allocated while in use (a listener lives as long as its connections,
   * and is idle nearly all that time). */
  pending_sock *socks;       /* room for socks_cap, at most RR_LISTEN_PENDING */
  int nsocks, socks_cap;
  pending_group *groups;     /* room for groups_cap, at most RR_LISTEN_GROUPS */
  int ngroups, groups_cap;
  listen_warned warned[RR_LISTEN_WARN_SLOTS];
  /* The listener outlives NCCL's closeListen while connections it accepted
   * live: their senders reconnect failed rails through it. */
  int nccl_closed;
  int ncomms, comms_cap;
  rr_recv_comm **comms;
};

/* One non-blocking read of the rest of a setup message into buf[*got,
 * need) (setup_ep.c). RR_OK: bytes arrived; RR_AGAIN: none now;
 * RR_ERR_PEER: the socket closed or failed (*why says how; `closed` is
 * the text for an orderly close). */
rr_status rr_setup_recv(int fd, uint8_t *buf, uint16_t *got, size_t need, const char *closed,
                        const char **why);
/* Read exactly what a handshake message needs, never a byte of what
 * follows it: decode_call sets `need` and says RR_AGAIN until the message is
 * complete. Evaluates to the decoder's verdict, RR_AGAIN while bytes are
 * missing, or RR_ERR_PEER. */
#define RR_SETUP_RECV_MSG(fd, buf, got, decode_call, closed, why)                            \
  ({                                                                                         \
    rr_status _r;                                                                            \
    for (;;) {                                                                               \
      size_t need = 0;                                                                       \
      _r = (decode_call);                                                                    \
      if (_r != RR_AGAIN) break;                                                             \
      _r = rr_setup_recv((fd), (buf), &(got), need, (closed), (why));                        \
      if (_r != RR_OK) break;                                                                \
    }                                                                                        \
    _r;                                                                                      \
  })

/* Endpoints through the rail seam (setup_ep.c): opened before the
 * handshake (the blob goes to the peer), connected after it with the peer's
 * blob and the authenticated sockets (taken: entries set to -1), abandoned
 * (destroyed, set to NULL) when the attempt fails. */
rr_status rr_setup_ep_open(int dev, rr_engine *e, rr_rail_ep **ep, uint8_t *blob, uint16_t *blob_len);
rr_status rr_setup_ep_addr(rr_rail_ep *ep, uint8_t *blob, uint16_t *blob_len);
rr_status rr_setup_ep_connect(rr_rail_ep **ep, int dev, rr_engine *e, const uint8_t *peer_blob,
                              uint16_t peer_blob_len, int *fds, int nfds);
void rr_setup_ep_abandon(rr_rail_ep **ep);

/* Socket helpers (conn_connect.c). */
rr_status rr_sock_tune(int fd);

/* The engine settings every new connection gets. */
void rr_core_engine_config(int role, size_t chunk_size, const struct sockaddr *peer,
                           rr_profiler_fn profiler, rr_engine_config *cfg);

/* Background thread (monitor.c): link-state events, and progress for
 * connections NCCL is not driving. */
void rr_monitor_add(rr_engine *e);
/* A send comm handed out before its ACCEPTs: the monitor confirms it
 * (rr_connect_confirm_background) and then drives its engine as any. */
void rr_monitor_add_confirming(rr_send_comm *s);
/* Set every pooled NIC's state from its interface flags now (the plugin's
 * start: a NIC down then is known down before the first connection plans
 * its rails; the background thread follows netlink from then on). */
void rr_monitor_read_links(const char *why);
void rr_monitor_remove(rr_engine *e);
void rr_monitor_add_listener(rr_listen_comm *l);
/* Stop the background thread now (it touches the devices). */
void rr_monitor_shutdown(void);
void rr_monitor_remove_listener(rr_listen_comm *l);

/* Take new sockets on a listener NCCL no longer calls accept() on: hands
 * reconnected rails to their connections (conn_connect.c; monitor thread). */
void rr_listen_service(rr_listen_comm *l);
/* A receive comm is closing: let go of its listener (frees it when NCCL
 * closed it too). */
void rr_listen_release(rr_recv_comm *rc);

#endif
