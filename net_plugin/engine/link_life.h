/* Life shared by the idle rails of one link (pure but for its atomics: unit
 * tested in test/unit/test_link_life.c; the engine's glue is engine_rails.c).
 *
 * A busy connection judges every rail for silence (docs/failover.md): a
 * rail that shows no life for δ/4 gets a PROBE, whose completion is its
 * life. A warm backup carries nothing, so it earns a probe and a signalled
 * credit word every δ/4, at both ends, on every busy connection: at 1,024
 * connections between two processes that is thousands of control requests
 * a second that say, again and again, the one thing every other rail
 * between the same two NICs says already (bench/RESULTS.md §11, addendum
 * "scale2048": in the Soft-RoCE lab rerail's liveness requests grew 2.8x
 * from 256 to 1,024 connections while the messages delivered halved).
 *
 * So a rail with nothing of its own under way (not the control rail, no
 * write of ours in flight on it, nothing invited over it) takes the life of
 * its link: the latest life any rail of this process showed over the same
 * local NIC to the same peer address, in the same role; every ACTIVE rail's
 * life feeds its link. Once the link's life is δ/4 old, one of its rails
 * probes it per δ/16 (the first to claim it) until an answer comes; the
 * rest wait for that life like their own. A link that goes silent still
 * fails each of its rails within δ of its last life, as before; what a rail no longer
 * finds while idle is a fault of its own queue pair on a link that lives
 * (docs/failover.md says why that is found when it carries work instead).
 *
 * The table is bounded: an entry per (role, NIC, peer address) some rail
 * of this process has now, counted by its rails; the last rail to leave a
 * link (closed, or moved to the address its reopened rail reached) frees
 * its entry for another link. A rail whose link finds the table full keeps
 * the per-rail rule. */
#ifndef RERAIL_ENGINE_LINK_LIFE_H
#define RERAIL_ENGINE_LINK_LIFE_H
#include <stdatomic.h>
#include <stdint.h>

#define RR_LINK_LIFE_MAX 512
#define RR_LINK_PEER_LEN 48

typedef struct rr_link_life {
  int role, dev;
  char peer[RR_LINK_PEER_LEN];
  int rails;                   /* rails holding the entry; 0: free (the table's lock) */
  _Atomic uint64_t life_ns;    /* the latest life a rail of the link showed */
  _Atomic uint64_t probe_ns;   /* when a rail of the link last claimed the probe */
} rr_link_life;

typedef struct rr_link_table {
  rr_link_life e[RR_LINK_LIFE_MAX];
  int used;                    /* entries held by some rail (the table's lock) */
} rr_link_table;

/* The slot of link (role, dev, peer), held for one more rail (added if need
 * be, in a free entry); -1 when every entry is held. A rail takes its slot
 * once, and gives it back with rr_link_life_release: the slot's life and
 * probe are read only by the rails holding it, so an entry is refilled
 * only when none does. Serialised by a lock of the table's own. */
int rr_link_life_slot(rr_link_table *t, int role, int dev, const char *peer);
/* A rail leaves slot (nothing for -1); the last one frees the entry. */
void rr_link_life_release(rr_link_table *t, int slot);
/* Entries held now (for tests and diagnostics). */
int rr_link_life_used(rr_link_table *t);
/* A rail of slot showed life at life_ns (later values win). */
void rr_link_life_saw(rr_link_table *t, int slot, uint64_t life_ns);
/* The link's latest life, 0 for slot -1 or none yet. */
uint64_t rr_link_life_get(const rr_link_table *t, int slot);
/* May the caller probe the link at now? Yes when no rail of it claimed a
 * probe within `every` ns before now (the claim is then the caller's), and
 * always for slot -1. */
int rr_link_life_claim_probe(rr_link_table *t, int slot, uint64_t now, uint64_t every);
/* Forget every link, while no rail holds one (the simulation starts each
 * world's clock afresh; tests start from an empty table). */
void rr_link_life_reset(rr_link_table *t);

/* The process's table, shared by every engine. */
extern rr_link_table rr_link_lives;

#endif
