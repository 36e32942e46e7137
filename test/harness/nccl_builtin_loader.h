/* NCCL's own net transports, found inside libnccl.so.2, for the harness and
 * the benchmarks: "--plugin nccl-socket[:PATH]" binds the socket transport
 * that NCCL_NET=Socket selects, "--plugin nccl-ib[:PATH]" the InfiniBand/RoCE
 * transport that NCCL_NET=IB selects, so that each is tested and measured
 * through the same driver as a plugin. See nccl_builtin_loader.c for how they
 * are found. */
#ifndef RERAIL_HARNESS_NCCL_BUILTIN_LOADER_H
#define RERAIL_HARNESS_NCCL_BUILTIN_LOADER_H
#include <stddef.h>
#include <stdint.h>

/* Whether spec names a built-in transport ("nccl-socket", "nccl-ib", either
 * with ":PATH"). */
int hnet_builtin_spec(const char *spec);

typedef struct hnet_builtin {
  void *dl;              /* dlopen handle of libnccl */
  const void *table;     /* the transport's ncclNet_v11_t, relocated */
  uintptr_t base;        /* load address of libnccl */
  char path[512];        /* the file that was opened */
} hnet_builtin;

/* Opens the library (PATH from the spec, else $NCCL_LIB, else "libnccl.so.2"
 * through the dynamic loader's search, else the one the build found), finds
 * the transport's table in the file's symbol table and checks that it is the
 * transport asked for. Returns 0 and fills *out, or prints why and returns -1
 * (nothing left open). The table is an ncclNet_v11_t: bind it as version 11. */
int hnet_builtin_open(const char *spec, hnet_builtin *out);

#endif
