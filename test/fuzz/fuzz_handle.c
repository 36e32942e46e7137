/* Fuzz the connection handle decoder (net_plugin/core/handle.c): the bytes
 * NCCL carries from one rank's listen() to another's connect(), i.e. input
 * from another process. NCCL always hands over RR_NET_HANDLE_SIZE bytes: the
 * input is cut or zero-padded to that and copied into a buffer of exactly
 * that size, so that reading past it is an ASan error. A handle that decodes
 * must give addresses a socket call can use as they are. */
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "fuzz_common.h"
#include "handle.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  rr_log_set_logger(fuzz_quiet_logger);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *h = malloc(RR_NET_HANDLE_SIZE);
  if (!h) return 0;
  memset(h, 0, RR_NET_HANDLE_SIZE);
  memcpy(h, data, size < RR_NET_HANDLE_SIZE ? size : RR_NET_HANDLE_SIZE);
  rr_peer_addrs out;
  memset(&out, 0xa5, sizeof out); /* a decoder that leaves fields unset shows */
  if (rr_handle_decode(h, &out) == RR_OK) {
    FUZZ_CHECK(out.naddrs >= 1 && out.naddrs <= RR_HANDLE_MAX_ADDRS);
    for (int i = 0; i < out.naddrs; i++) {
      const struct sockaddr_storage *a = &out.addrs[i];
      if (a->ss_family == AF_INET) {
        FUZZ_CHECK(out.addrlens[i] == sizeof(struct sockaddr_in));
        FUZZ_CHECK(((const struct sockaddr_in *)a)->sin_port != 0);
      } else {
        FUZZ_CHECK(a->ss_family == AF_INET6);
        FUZZ_CHECK(out.addrlens[i] == sizeof(struct sockaddr_in6));
        FUZZ_CHECK(((const struct sockaddr_in6 *)a)->sin6_port != 0);
      }
    }
  }
  free(h);
  return 0;
}
