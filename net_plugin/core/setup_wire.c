/* Connection-setup messages: encoding, decoding and keyed hashes
 * (setup_wire.h). No sockets and no state here, so a fuzzer drives the
 * decoders directly. The keyed hash is libsodium's HMAC-SHA256: no home-made
 * primitive. */
#include "setup_wire.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>
#include <sys/random.h>

_Static_assert(RR_HS_HELLO_LEN == RR_HS_HDR_LEN + 8 + 4 + 4 + 1 + 3 + 4 + RR_HS_NONCE_LEN, "HELLO layout");
_Static_assert(RR_HS_CHALLENGE_LEN == RR_HS_HDR_LEN + RR_HS_NONCE_LEN + 4 + RR_HS_MAC_LEN,
               "CHALLENGE layout");
_Static_assert(RR_HS_PROOF_FIXED == RR_HS_HDR_LEN + RR_HS_MAC_LEN + 4, "PROOF layout");
_Static_assert(RR_HS_ACCEPT_FIXED == RR_HS_PROOF_FIXED, "ACCEPT has PROOF's layout");
_Static_assert(RR_HS_MAC_LEN == crypto_auth_hmacsha256_BYTES, "MAC is an HMAC-SHA256");
_Static_assert(RR_HS_MAX_RAILS <= 32, "rails_mask is 32 bits");

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* Header: magic (4), version (2), type (1), reserved (1). */
static void put_hdr(uint8_t *p, int type) {
  put32(p, RR_HS_MAGIC);
  put16(p + 4, RR_HS_VERSION);
  p[6] = (uint8_t)type;
  p[7] = 0;
}

const char rr_hs_why_not_rerail[] = "not a rerail peer (bad magic)";

/* Checks the header once its 8 bytes are in, then waits for the message's
 * fixed part (`fixed` bytes, header included): RR_AGAIN with *need set
 * until both are there. */
static rr_status check_hdr(const uint8_t *buf, size_t len, int type, size_t fixed, size_t *need,
                           const char **why) {
  if (len < RR_HS_HDR_LEN) {
    *need = RR_HS_HDR_LEN;
    return RR_AGAIN;
  }
  if (get32(buf) != RR_HS_MAGIC) {
    *why = rr_hs_why_not_rerail;
    return RR_ERR_PROTOCOL;
  }
  if (get16(buf + 4) != RR_HS_VERSION) {
    *why = "a rerail peer of another connection-setup version (mixed rerail versions?)";
    return RR_ERR_UNSUPPORTED;
  }
  if (buf[6] != type || buf[7] != 0) {
    *why = "unexpected message type";
    return RR_ERR_PROTOCOL;
  }
  if (len < fixed) {
    *need = fixed;
    return RR_AGAIN;
  }
  return RR_OK;
}

size_t rr_hs_hello_encode(const rr_hs_hello *h, uint8_t out[RR_HS_HELLO_LEN]) {
  put_hdr(out, RR_HS_HELLO);
  put64(out + 8, h->conn_id);
  out[16] = h->rail;
  out[17] = h->stream;
  out[18] = h->nstreams;
  out[19] = h->flags;
  put32(out + 20, h->chunk_size);
  out[24] = h->dev;
  out[25] = out[26] = out[27] = 0; /* reserved */
  put32(out + 28, h->generation);
  memcpy(out + 32, h->nonce, RR_HS_NONCE_LEN);
  return RR_HS_HELLO_LEN;
}

rr_status rr_hs_hello_decode(const uint8_t *buf, size_t len, rr_hs_hello *out, size_t *need,
                             const char **why) {
  rr_status st = check_hdr(buf, len, RR_HS_HELLO, RR_HS_HELLO_LEN, need, why);
  if (st != RR_OK) return st;
  rr_hs_hello h;
  h.conn_id = get64(buf + 8);
  h.rail = buf[16];
  h.stream = buf[17];
  h.nstreams = buf[18];
  h.flags = buf[19];
  h.chunk_size = get32(buf + 20);
  h.dev = buf[24];
  h.generation = get32(buf + 28);
  memcpy(h.nonce, buf + 32, RR_HS_NONCE_LEN);
  *why = NULL;
  if (h.nstreams < 1 || h.nstreams > RR_HS_MAX_STREAMS || h.stream >= h.nstreams)
    *why = "malformed hello (streams)";
  else if (h.rail >= RR_HS_MAX_RAILS)
    *why = "malformed hello (rail)";
  else if (buf[25] || buf[26] || buf[27])
    *why = "malformed hello (reserved bytes)";
  else if (h.dev >= RR_HS_MAX_DEVS)
    *why = "malformed hello (device)";
  else if (h.chunk_size < 4096 || h.chunk_size > (64u << 20))
    *why = "malformed hello (chunk size)";
  else if (h.flags & ~RR_HS_FLAG_RECONNECT)
    *why = "malformed hello (unknown flags)";
  else if (!(h.flags & RR_HS_FLAG_RECONNECT) && h.generation != 0)
    *why = "malformed hello (a first connection with a generation)";
  if (*why) return RR_ERR_PROTOCOL;
  *out = h;
  return RR_OK;
}

size_t rr_hs_challenge_encode(const rr_hs_challenge *c, uint8_t out[RR_HS_CHALLENGE_LEN]) {
  put_hdr(out, RR_HS_CHALLENGE);
  memcpy(out + 8, c->nonce, RR_HS_NONCE_LEN);
  put32(out + 40, c->gen_floor);
  memcpy(out + 44, c->mac, RR_HS_MAC_LEN);
  return RR_HS_CHALLENGE_LEN;
}

rr_status rr_hs_challenge_decode(const uint8_t *buf, size_t len, rr_hs_challenge *out, size_t *need,
                                 const char **why) {
  rr_status st = check_hdr(buf, len, RR_HS_CHALLENGE, RR_HS_CHALLENGE_LEN, need, why);
  if (st != RR_OK) return st;
  memcpy(out->nonce, buf + 8, RR_HS_NONCE_LEN);
  out->gen_floor = get32(buf + 40);
  memcpy(out->mac, buf + 44, RR_HS_MAC_LEN);
  return RR_OK;
}

size_t rr_hs_proof_encode(int type, const rr_hs_proof *p, uint8_t out[RR_HS_MAX_LEN]) {
  uint16_t n = p->blob_len <= RR_HS_BLOB_MAX ? p->blob_len : RR_HS_BLOB_MAX;
  put_hdr(out, type);
  memcpy(out + 8, p->mac, RR_HS_MAC_LEN);
  put16(out + 40, n);
  put16(out + 42, 0);
  memcpy(out + RR_HS_PROOF_FIXED, p->blob, n);
  return RR_HS_PROOF_FIXED + n;
}

rr_status rr_hs_proof_decode(int type, const uint8_t *buf, size_t len, rr_hs_proof *out, size_t *need,
                             const char **why) {
  if (type != RR_HS_PROOF && type != RR_HS_ACCEPT) {
    *why = "not a proof or accept";
    return RR_ERR_INVALID;
  }
  rr_status st = check_hdr(buf, len, type, RR_HS_PROOF_FIXED, need, why);
  if (st != RR_OK) return st;
  uint16_t n = get16(buf + 40);
  if (n > RR_HS_BLOB_MAX || get16(buf + 42) != 0) {
    *why = "malformed proof (endpoint address length)";
    return RR_ERR_PROTOCOL;
  }
  if (len < (size_t)RR_HS_PROOF_FIXED + n) {
    *need = (size_t)RR_HS_PROOF_FIXED + n;
    return RR_AGAIN;
  }
  memcpy(out->mac, buf + 8, RR_HS_MAC_LEN);
  out->blob_len = n;
  memset(out->blob, 0, sizeof out->blob);
  memcpy(out->blob, buf + RR_HS_PROOF_FIXED, n);
  return RR_OK;
}

size_t rr_hs_commit_encode(const rr_hs_commit *c, uint8_t out[RR_HS_COMMIT_LEN]) {
  put_hdr(out, RR_HS_COMMIT);
  put32(out + 8, c->rails);
  uint32_t later = 0;
  for (int r = 0; r < RR_HS_MAX_RAILS; r++)
    if (c->later & (1u << r)) later |= (uint32_t)(c->later_addr[r] + 1u) << (4 * r);
  put32(out + 12, later);
  return RR_HS_COMMIT_LEN;
}

rr_status rr_hs_commit_decode(const uint8_t *buf, size_t len, rr_hs_commit *out, size_t *need,
                              const char **why) {
  rr_status st = check_hdr(buf, len, RR_HS_COMMIT, RR_HS_COMMIT_LEN, need, why);
  if (st != RR_OK) return st;
  uint32_t m = get32(buf + 8), later = get32(buf + 12);
  if (!m || (m >> RR_HS_MAX_RAILS)) {
    *why = "malformed commit (rails)";
    return RR_ERR_PROTOCOL;
  }
  memset(out, 0, sizeof *out);
  out->rails = m;
  for (int r = 0; r < RR_HS_MAX_RAILS; r++) {
    uint32_t nib = later >> (4 * r) & 0xfu;
    if (!nib) continue;
    if (nib > RR_HS_MAX_ADDRS || (m & (1u << r))) {
      *why = "malformed commit (rails to reopen later)";
      return RR_ERR_PROTOCOL;
    }
    out->later |= 1u << r;
    out->later_addr[r] = (uint8_t)(nib - 1);
  }
  return RR_OK;
}

/* The labels keep the three keyed hashes apart: a listener's proof is never
 * a valid connector proof, whatever the nonces. They did not change with
 * version 5: every hash covers the HELLO, which carries the version. */
static const char label_challenge[] = "rerail/setup/v4 challenge";
static const char label_proof[] = "rerail/setup/v4 proof";
static const char label_accept[] = "rerail/setup/v4 accept";

static void mac_start(crypto_auth_hmacsha256_state *s, const uint8_t *secret, const char *label,
                      const uint8_t *hello, const uint8_t *snonce) {
  crypto_auth_hmacsha256_init(s, secret, RR_HS_SECRET_LEN);
  crypto_auth_hmacsha256_update(s, (const unsigned char *)label, strlen(label) + 1);
  crypto_auth_hmacsha256_update(s, hello, RR_HS_HELLO_LEN);
  crypto_auth_hmacsha256_update(s, snonce, RR_HS_NONCE_LEN);
}

void rr_hs_mac_challenge(const uint8_t secret[RR_HS_SECRET_LEN], const uint8_t hello[RR_HS_HELLO_LEN],
                         const uint8_t snonce[RR_HS_NONCE_LEN], uint32_t gen_floor,
                         uint8_t mac[RR_HS_MAC_LEN]) {
  crypto_auth_hmacsha256_state s;
  uint8_t g[4];
  put32(g, gen_floor);
  mac_start(&s, secret, label_challenge, hello, snonce);
  crypto_auth_hmacsha256_update(&s, g, sizeof g);
  crypto_auth_hmacsha256_final(&s, mac);
  sodium_memzero(&s, sizeof s);
}

void rr_hs_mac_blob(int type, const uint8_t secret[RR_HS_SECRET_LEN],
                    const uint8_t hello[RR_HS_HELLO_LEN], const uint8_t snonce[RR_HS_NONCE_LEN],
                    const uint8_t *blob, uint16_t blob_len, uint8_t mac[RR_HS_MAC_LEN]) {
  crypto_auth_hmacsha256_state s;
  uint8_t n[2];
  put16(n, blob_len);
  mac_start(&s, secret, type == RR_HS_ACCEPT ? label_accept : label_proof, hello, snonce);
  crypto_auth_hmacsha256_update(&s, n, sizeof n);
  if (blob_len) crypto_auth_hmacsha256_update(&s, blob, blob_len);
  crypto_auth_hmacsha256_final(&s, mac);
  sodium_memzero(&s, sizeof s);
}

int rr_hs_mac_equal(const uint8_t a[RR_HS_MAC_LEN], const uint8_t b[RR_HS_MAC_LEN]) {
  return crypto_verify_32(a, b) == 0;
}

rr_status rr_hs_random(void *buf, size_t len) {
  /* The kernel's generator: it blocks only until it is seeded once at boot. */
  uint8_t *p = buf;
  while (len) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return RR_ERR_SYSTEM;
    p += n;
    len -= (size_t)n;
  }
  return RR_OK;
}

int rr_hs_reconnect_in_window(uint32_t gen, uint32_t floor) {
  return gen >= floor && gen - floor <= RR_HS_GEN_WINDOW;
}
