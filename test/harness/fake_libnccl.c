/* A stand-in for libnccl.so.2 that holds a local `ncclNetIb` table, to check
 * the harness's built-in loader (nccl_builtin_loader.c) without NCCL or
 * RDMA: built once per FAKE_VARIANT, each library is right in every way but
 * one, so each check of the loader is seen to refuse it before calling in.
 *   FAKE_GOOD       a well-formed table named "IB" whose init() fails (as
 *                   NCCL's does with NCCL_IB_DISABLE=1 or without libibverbs):
 *                   the loader binds it and the harness must report the error
 *   FAKE_WRONG_NAME the table names itself "Socket"
 *   FAKE_WRONG_SIZE the symbol is larger than an ncclNet_v11_t
 *   FAKE_FOREIGN_FN one entry points into libc, not into this library
 * init() creates the file named by $FAKE_NCCL_INIT_MARK, so a test can tell
 * "refused before init" from "bound, then init failed". */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "nccl/net_v11.h"

#define FAKE_SYSTEM_ERROR 2   /* ncclSystemError */

static nccl_result_t fake_init(void **ctx, uint64_t comm_id, nccl_net_comm_config_v11_t *config,
                               nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  (void)ctx, (void)comm_id, (void)config, (void)logger, (void)profiler;
  const char *mark = getenv("FAKE_NCCL_INIT_MARK");
  if (mark && *mark) {
    int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
  return FAKE_SYSTEM_ERROR;
}

/* Every other entry: never called (init fails, or the table is refused), so
 * one function stands for all; the conversion goes through void (*)(void),
 * the generic function pointer type. */
static nccl_result_t fake_fail(void) { return FAKE_SYSTEM_ERROR; }
#define F(member) .member = (__typeof__(((nccl_net_v11_t *)0)->member))(void (*)(void))fake_fail

#define FAKE_TABLE_ENTRIES                                                                          \
  .init = fake_init, F(devices), F(get_properties), F(listen), F(connect), F(accept), F(reg_mr),    \
      F(dereg_mr), F(isend), F(irecv), F(iflush), F(test), F(close_send), F(close_recv),          \
      F(finalize), FAKE_CLOSE_LISTEN

#if defined(FAKE_FOREIGN_FN)
/* abort() is libc's: the loader must refuse a table whose entry leaves the library. */
#define FAKE_CLOSE_LISTEN .close_listen = (nccl_result_t(*)(void *))(void (*)(void))abort
#else
#define FAKE_CLOSE_LISTEN F(close_listen)
#endif

#if defined(FAKE_GOOD)
__attribute__((used)) static const nccl_net_v11_t ncclNetIb = {.name = "IB", FAKE_TABLE_ENTRIES};
#elif defined(FAKE_WRONG_NAME)
__attribute__((used)) static const nccl_net_v11_t ncclNetIb = {.name = "Socket", FAKE_TABLE_ENTRIES};
#elif defined(FAKE_WRONG_SIZE)
__attribute__((used)) static const struct {
  nccl_net_v11_t t;
  void *extra;
} ncclNetIb = {.t = {.name = "IB", FAKE_TABLE_ENTRIES}};
#elif defined(FAKE_FOREIGN_FN)
__attribute__((used)) static const nccl_net_v11_t ncclNetIb = {.name = "IB", FAKE_TABLE_ENTRIES};
#else
#error "define one FAKE_ variant"
#endif
