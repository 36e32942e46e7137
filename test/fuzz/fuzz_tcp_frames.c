/* Fuzz target: bytes from a hostile peer on a TCP rail, through the real
 * rail (framing) and the real receiving engine (clear-to-sends, the checks
 * that decide where a write may land).
 *
 * A receive of two buffers is posted inside a larger allocation whose
 * guard zones hold a pattern; whatever the input, no byte outside the
 * posted buffers may change, nothing may crash, and the connection may
 * lose the rail but never touch memory it was not given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine_internal.h" /* the engine by value */
#include "fuzz_common.h"
#include "rail_tcp.h"

#define GUARD 4096
#define BUF0 16384
#define BUF1 20000
#define ARENA (GUARD + BUF0 + GUARD + BUF1 + GUARD)
/* Fixed address and key, so inputs can name the posted buffers (outside
 * the sanitizers' shadow ranges on x86-64). */
#define ARENA_ADDR ((void *)0x200000000000ull)
#define FUZZ_RKEY 0x11223344u

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  rr_log_set_logger(fuzz_quiet_logger);
  return 0;
}

static const size_t guard_at[3] = {0, GUARD + BUF0, GUARD + BUF0 + GUARD + BUF1};

static void guards_fill(unsigned char *a) {
  for (int g = 0; g < 3; g++)
    for (size_t i = 0; i < GUARD; i++) a[guard_at[g] + i] = (unsigned char)(0xa5 ^ i);
}

static int guards_intact(const unsigned char *a) {
  for (int g = 0; g < 3; g++)
    for (size_t i = 0; i < GUARD; i++)
      if (a[guard_at[g] + i] != (unsigned char)(0xa5 ^ i)) return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 60000) return 0; /* one socket buffer's worth: the write below must not block */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  int bufsz = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);

  static rr_engine e;
  rr_engine_config cfg = {.role = RR_ENGINE_RECV, .chunk_size = 4096, .progress_timeout_ns = 1000000000ull,
                          .failback_hold_ns = 500000000ull};
  rr_engine_init(&e, &cfg);
  rr_rail_dev *dev = NULL;
  rr_tcp_dev_open(0, &dev);
  rr_rail_ep *ep = NULL;
  dev->ops->ep_open(dev, &rr_engine_rail_events, &e, &ep);
  int fds[1] = {sv[0]};
  rr_rail_connect_args args = {.fds = fds, .nfds = 1};
  ep->ops->ep_connect(ep, &args);
  rr_engine_add_rail(&e, ep, 1, "fuzz0", "peer");

  unsigned char *arena = mmap(ARENA_ADDR, ARENA, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (arena != ARENA_ADDR) abort();
  guards_fill(arena);
  rr_mr mr = {.base = arena, .size = ARENA, .type = RR_PTR_HOST};
  dev->ops->reg_mr(dev, arena, ARENA, RR_MEM_HOST, -1, 0, &mr.reg[0]);
  mr.reg[0]->rkey = FUZZ_RKEY;
  void *bufs[2] = {arena + GUARD, arena + GUARD + BUF0 + GUARD};
  size_t sizes[2] = {BUF0, BUF1};
  int tags[2] = {1, 2};
  rr_mr *mrs[2] = {&mr, &mr};
  void *req = NULL;
  rr_engine_irecv(&e, 2, bufs, sizes, tags, mrs, NULL, &req);

  /* The hostile peer speaks, then hangs up. */
  if (size && write(sv[1], data, size) < 0) {
  }
  shutdown(sv[1], SHUT_WR);
  for (int i = 0; i < 64 && req; i++) {
    int done = 0;
    size_t got[2];
    if (rr_engine_test(req, &done, got) != RR_OK || done) break;
    char sink[4096];
    while (read(sv[1], sink, sizeof sink) > 0) {
    } /* our clear-to-sends */
  }
  FUZZ_CHECK(guards_intact(arena));

  rr_engine_fini(&e);
  dev->ops->dereg_mr(mr.reg[0]);
  dev->ops->dev_close(dev);
  close(sv[1]);
  munmap(arena, ARENA);
  return 0;
}
