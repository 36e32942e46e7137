/* Wire format of connection setup (docs/protocol.md, "Connection setup and
 * authentication"): the four messages every setup socket carries before it
 * becomes a rail's data path, and the keyed hashes that prove both ends hold
 * the handle's secret.
 *
 *   connector -> listener  HELLO      who: connection id, rail, stream, flags,
 *                                     generation, the listener's device the
 *                                     rail is for, client nonce
 *   listener  -> connector CHALLENGE  server nonce, the rail's generation floor,
 *                                     the listener's proof
 *   connector -> listener  PROOF      the connector's proof, its endpoint blob
 *   listener  -> connector ACCEPT     the listener's endpoint blob, its proof
 *   connector -> listener  COMMIT     once, on stream 0 of the lowest rail
 *                                     that came up: the final set of rails,
 *                                     and the rails of the connection that
 *                                     could not be reached yet (a reconnect:
 *                                     its one rail, and the word to install it);
 *                                     or early, behind the PROOF, when the set
 *                                     can change only by a failure
 *                                     (conn_connect.c, early_commit_due)
 *
 * Each socket authenticates on its own as soon as it connects, so a rail that
 * is slow to come up never holds another rail's socket past the listener's
 * pre-authentication deadline; the set of rails follows once it is known.
 * Every field is little-endian and encoded byte by byte: nothing here depends
 * on the host's byte order or struct layout. The decoders are pure (bytes in,
 * struct or a reason out) and check everything a peer could get wrong: they
 * are the first code an unauthenticated peer reaches, and are fuzzed
 * (test/fuzz/fuzz_hello.c). The secret never travels: only HMAC-SHA256 values
 * over both nonces, so a proof cannot be replayed on another socket. */
#ifndef RERAIL_CORE_SETUP_WIRE_H
#define RERAIL_CORE_SETUP_WIRE_H
#include <stddef.h>
#include <stdint.h>

#include "rr_status.h"

#define RR_HS_MAGIC 0x33435252u      /* "RRC3" read little-endian */
/* 6: HELLO names the listener's device (setup of RDMA rails shares one
 * out-of-band address); 5: COMMIT names the rails reopened later;
 * 4: challenge-response; 3 sent a token in clear */
#define RR_HS_VERSION 6
#define RR_HS_SECRET_LEN 32
#define RR_HS_NONCE_LEN 32
#define RR_HS_MAC_LEN 32
#define RR_HS_BLOB_MAX 128           /* = RR_RAIL_ADDR_MAX (checked where both are known) */
#define RR_HS_MAX_STREAMS 8          /* setup sockets per rail */
#define RR_HS_MAX_RAILS 8
#define RR_HS_MAX_ADDRS 8            /* = RR_HANDLE_MAX_ADDRS (checked in handle.h) */
#define RR_HS_MAX_DEVS 32            /* a HELLO's device: below it (= RR_MAX_NETIFS) */
/* A reconnect may name at most this many generations beyond the rail's
 * floor (the listener's newest installed or authenticated attempt), so a peer
 * cannot push a rail's generation out of reach of the real sender. */
#define RR_HS_GEN_WINDOW 16u

enum rr_hs_type { RR_HS_HELLO = 1, RR_HS_CHALLENGE = 2, RR_HS_PROOF = 3, RR_HS_ACCEPT = 4,
                  RR_HS_COMMIT = 5 };
#define RR_HS_FLAG_RECONNECT 0x1u    /* a rail of a live connection, reopened */

/* Sizes on the wire. PROOF and ACCEPT are a fixed part followed by a blob
 * whose length the fixed part gives. */
#define RR_HS_HDR_LEN 8
#define RR_HS_HELLO_LEN 64
#define RR_HS_CHALLENGE_LEN 76
#define RR_HS_PROOF_FIXED 44
#define RR_HS_ACCEPT_FIXED 44
#define RR_HS_COMMIT_LEN 16
#define RR_HS_MAX_LEN (RR_HS_PROOF_FIXED + RR_HS_BLOB_MAX)

typedef struct rr_hs_hello {
  uint64_t conn_id;
  uint8_t rail, stream, nstreams, flags;
  uint32_t chunk_size;
  uint8_t dev;         /* the listener's device this rail is for (a handle entry's); untrusted */
  uint32_t generation;
  uint8_t nonce[RR_HS_NONCE_LEN];
} rr_hs_hello;

typedef struct rr_hs_challenge {
  uint8_t nonce[RR_HS_NONCE_LEN];
  uint32_t gen_floor;  /* reconnects: the newest generation the listener holds for the rail */
  uint8_t mac[RR_HS_MAC_LEN];
} rr_hs_challenge;

/* PROOF and ACCEPT share a shape: a keyed hash and an endpoint blob. */
typedef struct rr_hs_proof {
  uint8_t mac[RR_HS_MAC_LEN];
  uint16_t blob_len;
  uint8_t blob[RR_HS_BLOB_MAX];
} rr_hs_proof;

/* COMMIT: the rails whose sockets are all there now (`rails`, never empty),
 * and the rails that belong to the connection although they could not be
 * reached while it was set up (`later`: a NIC of either end was down). Both
 * ends hold a later rail as one that failed; the connector reopens it like
 * any failed rail once its path works, to the listener's address
 * later_addr[r] (an index into the handle's addresses), which tells the
 * listener the device that rail will arrive on. A reconnect's COMMIT names
 * its one rail and no later ones. On the wire: rails (4), then one nibble per
 * rail (rail r: bits 4r..4r+3), 0 for a rail that is not later, else 1 + its
 * address index. */
typedef struct rr_hs_commit {
  uint32_t rails;
  uint32_t later;
  uint8_t later_addr[RR_HS_MAX_RAILS];
} rr_hs_commit;

/* Encoders write exactly the message's length into out and return it. */
size_t rr_hs_hello_encode(const rr_hs_hello *h, uint8_t out[RR_HS_HELLO_LEN]);
size_t rr_hs_challenge_encode(const rr_hs_challenge *c, uint8_t out[RR_HS_CHALLENGE_LEN]);
size_t rr_hs_proof_encode(int type, const rr_hs_proof *p, uint8_t out[RR_HS_MAX_LEN]);
size_t rr_hs_commit_encode(const rr_hs_commit *c, uint8_t out[RR_HS_COMMIT_LEN]);

/* Decoders: RR_OK with *out filled; RR_AGAIN when more bytes are needed
 * (*need says how many in all); RR_ERR_PROTOCOL with *why otherwise
 * (rr_hs_why_not_rerail, the very pointer, when the bytes are not rerail's
 * at all: the listener counts that apart from a malformed message).
 * RR_ERR_UNSUPPORTED: a rerail peer of another protocol version. */
extern const char rr_hs_why_not_rerail[];
rr_status rr_hs_hello_decode(const uint8_t *buf, size_t len, rr_hs_hello *out, size_t *need,
                             const char **why);
rr_status rr_hs_challenge_decode(const uint8_t *buf, size_t len, rr_hs_challenge *out,
                                 size_t *need, const char **why);
rr_status rr_hs_proof_decode(int type, const uint8_t *buf, size_t len, rr_hs_proof *out,
                             size_t *need, const char **why);
rr_status rr_hs_commit_decode(const uint8_t *buf, size_t len, rr_hs_commit *out, size_t *need,
                              const char **why);

/* Keyed hashes (HMAC-SHA256 under the handle's secret). Each is over a
 * label naming its role (so one can never be replayed as another), the
 * encoded HELLO (which holds the client nonce) and the server nonce, plus
 * what that message adds. */
void rr_hs_mac_challenge(const uint8_t secret[RR_HS_SECRET_LEN], const uint8_t hello[RR_HS_HELLO_LEN],
                         const uint8_t snonce[RR_HS_NONCE_LEN], uint32_t gen_floor,
                         uint8_t mac[RR_HS_MAC_LEN]);
void rr_hs_mac_blob(int type, const uint8_t secret[RR_HS_SECRET_LEN],
                    const uint8_t hello[RR_HS_HELLO_LEN], const uint8_t snonce[RR_HS_NONCE_LEN],
                    const uint8_t *blob, uint16_t blob_len, uint8_t mac[RR_HS_MAC_LEN]);
/* May a reconnect numbered gen go on with a listener whose CHALLENGE gave
 * floor (the newest generation it has seen proven for the rail)? gen must
 * not be older than the floor, nor more than RR_HS_GEN_WINDOW past it. It
 * may equal it: every attempt has a generation of its own, so a floor at
 * gen is this attempt's other stream, whose PROOF reached the listener
 * first (its SYN resent a second later over a lossy path, say), and the
 * listener takes the rest of the attempt. 1: go on; 0: resynchronise. */
int rr_hs_reconnect_in_window(uint32_t gen, uint32_t floor);
/* Constant-time comparison of two MACs: 1 when equal. */
int rr_hs_mac_equal(const uint8_t a[RR_HS_MAC_LEN], const uint8_t b[RR_HS_MAC_LEN]);

/* Fill buf with unpredictable bytes (secrets, nonces). */
rr_status rr_hs_random(void *buf, size_t len);

#endif
