# The transfer engine's sources, named once: the plugin, the deterministic
# simulation (test/sim) and the fuzz project (test/fuzz, a CMake project of
# its own) all compile the same engine.
set(RERAIL_ENGINE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/engine.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_send.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_send_rails.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_recv.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_recv_acks.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_rails.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_inbound.c
  ${CMAKE_CURRENT_LIST_DIR}/link_life.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_gray.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_gray_probe.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_gray_notice.c
  ${CMAKE_CURRENT_LIST_DIR}/gray_latency.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_wire.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_close.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_phase.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_prof.c)
