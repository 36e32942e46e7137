/* libFuzzer target: the connection-setup decoders (net_plugin/core/
 * setup_wire.c) and the handle parser, the first code an unauthenticated
 * peer (or a corrupted bootstrap) reaches. The first byte picks the decoder;
 * the rest is the message. Build with the rest of test/fuzz (clang
 * -fsanitize=fuzzer,address, linking setup_wire.c, handle.c and libsodium). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "handle.h"
#include "setup_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *m = data + 1;
  size_t n = size - 1, need = 0;
  const char *why = NULL;
  union { rr_hs_hello h; rr_hs_challenge c; rr_hs_proof p; uint32_t mask; rr_peer_addrs a; } out;
  uint8_t handle[RR_NET_HANDLE_SIZE] = {0};
  switch (data[0] % 6) {
  case 0: rr_hs_hello_decode(m, n, &out.h, &need, &why); break;
  case 1: rr_hs_challenge_decode(m, n, &out.c, &need, &why); break;
  case 2: rr_hs_proof_decode(RR_HS_PROOF, m, n, &out.p, &need, &why); break;
  case 3: rr_hs_proof_decode(RR_HS_ACCEPT, m, n, &out.p, &need, &why); break;
  case 4: rr_hs_commit_decode(m, n, &out.mask, &need, &why); break;
  case 5:
    memcpy(handle, m, n < sizeof handle ? n : sizeof handle);
    rr_handle_parse(handle, &out.a, &why);
    break;
  }
  /* A decoder that asks for more must ask for more than it had, and never
   * for more than the largest message. */
  if (need && (need <= n || need > RR_HS_MAX_LEN)) __builtin_trap();
  return 0;
}
