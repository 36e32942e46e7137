/* Registrations on the verbs rail, on the fake libibverbs (verbs_ep_fixture.h): the
 * registration cache (a hash table) and no lock held across ibv_reg_mr, and the counters of
 * registrations made after a NIC or rail of the process went down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>

#include "rr_counters.h"
#include "rr_health_bus.h"

#include "verbs_ep_fixture.h"

typedef struct reg_job {
  world *w;
  void *buf;
  rr_rail_mr *mr;
  rr_status st;
} reg_job;

static void *reg_thread(void *arg) {
  reg_job *j = arg;
  j->st = verbs_reg_mr(&j->w->h->base, j->buf, 4096, RR_MEM_HOST, -1, 0, &j->mr);
  return NULL;
}

static void reg_reset(void) {
  user_regs = user_deregs = 0;
  reg_block_first = reg_inside = reg_release = 0;
}

/* While one thread sits in ibv_reg_mr (the fake blocks it until released), an endpoint's
 * progress on another thread delivers, a cached buffer is found, another buffer is
 * registered, and the same buffer registered by a second thread is cached first: the
 * blocked registration then finds it, deregisters its own MR and shares the cached one. */
static void test_registration_never_stalls_progress(void **state) {
  world *w = *state;
  open_pair(w, "1");
  reg_reset();
  rr_rail_mr *cached = NULL;
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[1], 4096, RR_MEM_HOST, -1, 0, &cached), RR_OK);
  reg_block_first = 1;
  user_regs = 0;
  reg_job slow = {.w = w, .buf = user_buf[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, reg_thread, &slow), 0);
  pthread_mutex_lock(&reg_mu);
  while (!reg_inside) pthread_cond_wait(&reg_cv, &reg_mu);
  pthread_mutex_unlock(&reg_mu);
  /* The registration is inside ibv_reg_mr now, and stays there until released. */
  assert_int_equal(ctrl(w, 0, 0xd1), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nlog, 1); /* delivered during the registration */
  expect(0, 1, EV_CTRL, 0xd1);
  rr_rail_mr *hit = NULL, *other = NULL, *dup = NULL;
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[1], 4096, RR_MEM_HOST, -1, 0, &hit), RR_OK);
  assert_int_equal(hit->lkey, cached->lkey); /* from the cache, no ibv_reg_mr */
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[2], 4096, RR_MEM_HOST, -1, 0, &other), RR_OK);
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &dup), RR_OK);
  pthread_mutex_lock(&reg_mu);
  assert_int_equal(reg_inside, 1); /* all of that while the first registration was blocked */
  assert_int_equal(user_regs, 3);
  reg_release = 1;
  pthread_cond_broadcast(&reg_cv);
  pthread_mutex_unlock(&reg_mu);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(slow.st, RR_OK);
  /* The racing registration lost: its MR deregistered, the cached one shared. */
  assert_int_equal(user_deregs, 1);
  assert_int_equal(slow.mr->lkey, dup->lkey);
  assert_int_equal(verbs_mr_cache_count(w->h->mrs), 3);
  verbs_dereg_mr(slow.mr);
  assert_int_equal(user_deregs, 1); /* dup still holds it */
  verbs_dereg_mr(dup);
  verbs_dereg_mr(hit);
  verbs_dereg_mr(cached);
  verbs_dereg_mr(other);
  assert_int_equal(user_deregs, 4);
  assert_int_equal(verbs_mr_cache_count(w->h->mrs), 0);
}

/* Registrations are counted, and those after a NIC or rail of the process went down apart
 * (the lab asserts none happen then); a cached buffer registers nothing. */
static void test_registrations_counted_apart_after_a_down(void **state) {
  world *w = *state;
  reg_reset();
  uint64_t regs = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), late = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN);
  rr_rail_mr *a = NULL, *again = NULL, *b = NULL;
  if (!rr_health_down_seen()) {
    assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &a), RR_OK);
    assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &again), RR_OK);
    assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), regs + 1);
    assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN), late);
    rr_health_nic_state(0, "test0", RR_LINK_DOWN, "unit test"); /* the process's first down */
  }
  assert_true(rr_health_down_seen());
  regs = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS);
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[2], 4096, RR_MEM_HOST, -1, 0, &b), RR_OK);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), regs);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN), late + 1);
  rr_health_nic_state(0, "test0", RR_LINK_UP, "unit test");
  if (a) verbs_dereg_mr(a);
  if (again) verbs_dereg_mr(again);
  verbs_dereg_mr(b);
}

/* The cache keys on (base, len, kind) and finds each of many buffers again. */
static void test_registration_cache_many(void **state) {
  (void)state;
  verbs_mr_cache *c;
  assert_int_equal(verbs_mr_cache_create(&c), RR_OK);
  enum { N = 5000 };
  static struct ibv_mr mrs[N];
  static char region[N];
  for (int i = 0; i < N; i++) {
    int raced = 1;
    assert_non_null(verbs_mr_cache_put(c, region + i, 64, RR_MEM_HOST, &mrs[i], &raced));
    assert_int_equal(raced, 0);
  }
  assert_int_equal(verbs_mr_cache_count(c), N);
  for (int i = 0; i < N; i++) {
    verbs_mr_entry *e = verbs_mr_cache_get(c, region + i, 64, RR_MEM_HOST);
    assert_non_null(e);
    assert_ptr_equal(verbs_mr_entry_mr(e), &mrs[i]);
    assert_null(verbs_mr_cache_release(c, e)); /* the put's reference remains */
    assert_null(verbs_mr_cache_get(c, region + i, 65, RR_MEM_HOST));
    assert_null(verbs_mr_cache_get(c, region + i, 64, RR_MEM_CUDA));
  }
  for (int i = 0; i < N; i++) {
    verbs_mr_entry *e = verbs_mr_cache_get(c, region + i, 64, RR_MEM_HOST);
    assert_null(verbs_mr_cache_release(c, e));
    assert_ptr_equal(verbs_mr_cache_release(c, e), &mrs[i]); /* the last reference */
  }
  assert_int_equal(verbs_mr_cache_count(c), 0);
  verbs_mr_cache_destroy(c, &fake_api);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_registration_never_stalls_progress, setup, teardown),
      cmocka_unit_test_setup_teardown(test_registrations_counted_apart_after_a_down, setup, teardown),
      cmocka_unit_test(test_registration_cache_many),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
