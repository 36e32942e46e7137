#include "peer_progress.h"

#include <string.h>

int rr_peer_table_ref(rr_peer_table *t, const uint8_t id[RR_HANDLE_PROCESS_LEN]) {
  int free_slot = -1;
  for (int i = 0; i < RR_PEER_TABLE_MAX; i++) {
    rr_peer_entry *e = &t->e[i];
    if (!e->refs) {
      if (free_slot < 0) free_slot = i;
    } else if (!memcmp(e->id, id, RR_HANDLE_PROCESS_LEN)) {
      e->refs++;
      return i;
    }
  }
  if (free_slot < 0) return -1;
  rr_peer_entry *e = &t->e[free_slot];
  memcpy(e->id, id, RR_HANDLE_PROCESS_LEN);
  e->refs = 1;
  e->answers = 0;
  return free_slot;
}

void rr_peer_table_unref(rr_peer_table *t, int slot) {
  if (slot >= 0 && slot < RR_PEER_TABLE_MAX && t->e[slot].refs) t->e[slot].refs--;
}

void rr_peer_table_answered(rr_peer_table *t, int slot) {
  if (slot >= 0 && slot < RR_PEER_TABLE_MAX) t->e[slot].answers++;
}

uint64_t rr_peer_table_progress(const rr_peer_table *t, int slot, uint64_t own) {
  return slot >= 0 && slot < RR_PEER_TABLE_MAX ? own + t->e[slot].answers : own;
}
