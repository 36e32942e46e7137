/* The simulation's clock, shadowing common/base/rr_clock.h: the engine sources
 * compiled into rerail-sim find this header first on the include path, so
 * every timeout they measure runs on virtual time, which the scheduler
 * advances. Same guard as the real header: whichever comes first wins, and
 * the sim checks at start that it is this one (sim_clock_is_virtual). */
#ifndef RERAIL_COMMON_CLOCK_H
#define RERAIL_COMMON_CLOCK_H
#include <stdint.h>

#define RERAIL_SIM_CLOCK 1
extern uint64_t sim_now_ns;

static inline uint64_t rr_now_ns(void) { return sim_now_ns; }
/* The coarse clock of a kernel ticking at 250 Hz (Debian's): 4 ms steps. */
#define SIM_COARSE_TICK_NS 4000000ull
static inline uint64_t rr_now_coarse_ns(void) { return sim_now_ns - sim_now_ns % SIM_COARSE_TICK_NS; }
#endif
