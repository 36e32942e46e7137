/* Fuzz the connection-setup decoders (net_plugin/core/setup_wire.c): the
 * first code an unauthenticated peer reaches on a listener, and what a
 * listener (or an impostor) sends back to a connector. The first byte picks
 * the decoder; the rest is the message, copied into a buffer of exactly its
 * size so that reading past it is an ASan error. A decoder that asks for more
 * must ask for more than it had and no more than the largest message; one
 * that accepts must give fields inside the protocol's bounds. The endpoint
 * blob a PROOF or ACCEPT carries goes on through the verbs rail's address
 * decoder, which must refuse it or give back exactly the bytes it read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "setup_wire.h"
#include "verbs_addr.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  rr_log_set_logger(fuzz_quiet_logger); /* the decoders do not log; anything linked later stays quiet */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t n = size - 1, need = 0;
  uint8_t *m = malloc(n ? n : 1);
  if (!m) return 0;
  memcpy(m, data + 1, n);
  const char *why = NULL;
  rr_status st = RR_ERR_INVALID;
  rr_hs_hello h;
  rr_hs_challenge c;
  rr_hs_proof p;
  rr_hs_commit cm;
  switch (data[0] % 5) {
  case 0:
    st = rr_hs_hello_decode(m, n, &h, &need, &why);
    if (st == RR_OK)
      FUZZ_CHECK(h.nstreams >= 1 && h.nstreams <= RR_HS_MAX_STREAMS && h.stream < h.nstreams &&
                 h.rail < RR_HS_MAX_RAILS && h.chunk_size >= 4096 && h.chunk_size <= (64u << 20));
    break;
  case 1: st = rr_hs_challenge_decode(m, n, &c, &need, &why); break;
  case 2:
  case 3:
    st = rr_hs_proof_decode(data[0] % 5 == 2 ? RR_HS_PROOF : RR_HS_ACCEPT, m, n, &p, &need, &why);
    if (st == RR_OK) {
      FUZZ_CHECK(p.blob_len <= RR_HS_BLOB_MAX && RR_HS_PROOF_FIXED + (size_t)p.blob_len <= n);
      rr_verbs_addr a;
      if (rr_verbs_addr_decode(p.blob, p.blob_len, &a) == RR_OK) {
        uint8_t again[RR_VERBS_ADDR_LEN];
        rr_verbs_addr_encode(&a, again);
        FUZZ_CHECK(p.blob_len == RR_VERBS_ADDR_LEN && !memcmp(again, p.blob, RR_VERBS_ADDR_LEN));
        FUZZ_CHECK(a.psn < (1u << 24) && a.nqps >= 1 && a.nqps <= RR_VERBS_MAX_QPS);
        for (int k = 0; k < RR_VERBS_MAX_QPS; k++) FUZZ_CHECK(k < a.nqps ? a.qpn[k] < (1u << 24) : a.qpn[k] == 0);
      }
    }
    break;
  case 4:
    st = rr_hs_commit_decode(m, n, &cm, &need, &why);
    if (st == RR_OK) {
      FUZZ_CHECK(cm.rails && !(cm.rails >> RR_HS_MAX_RAILS) && !(cm.rails & cm.later) && !(cm.later >> RR_HS_MAX_RAILS));
      for (int r = 0; r < RR_HS_MAX_RAILS; r++) FUZZ_CHECK(cm.later_addr[r] < RR_HS_MAX_ADDRS);
      uint8_t again[RR_HS_COMMIT_LEN];
      rr_hs_commit_encode(&cm, again);
      FUZZ_CHECK(!memcmp(again, m, RR_HS_COMMIT_LEN));
    }
    break;
  }
  if (st == RR_AGAIN) FUZZ_CHECK(need > n && need <= RR_HS_MAX_LEN);
  if (rr_failed(st)) FUZZ_CHECK(why != NULL);
  free(m);
  return 0;
}
