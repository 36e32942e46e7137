/* The id of a rerail connection, for test programs.
 *
 * libnccl-net-rerail.so exports rerailConnId_v1 next to its NCCL tables. A
 * connection's id is drawn by its connecting side and sent in every setup
 * hello, so both ends know it; a program that dlopen()ed the plugin (the
 * test harness) can learn it without reading log text, and hand it to a
 * test that plays a peer holding the handle (a reconnect names its
 * connection by this id).
 *
 * rerailConnId_v1(comm, &id): comm is a send comm connect() returned or a
 * receive comm accept() returned, not yet closed. Returns 0 and sets *id,
 * or -1 for anything else (NULL, a listen comm, a closed comm). */
#ifndef RERAIL_CONN_ID_H
#define RERAIL_CONN_ID_H
#include <stdint.h>

#define RERAIL_CONN_ID_SYMBOL "rerailConnId_v1"
typedef int rerail_conn_id_v1_fn(const void *comm, uint64_t *id);

#endif
