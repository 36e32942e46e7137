# Run by cpack before it packs (CPACK_PROJECT_CONFIG_FILE): refuse a build
# whose .deb would be wrong. NCCL dlopen()s "libnccl-net-rerail.so" by name,
# so the library must sit in a directory the loader searches by default: the
# multiarch one, which GNUInstallDirs picks only for the prefix /usr.
if(CPACK_GENERATOR STREQUAL "DEB")
  if(NOT CPACK_RERAIL_INSTALL_PREFIX STREQUAL "/usr" OR NOT CPACK_RERAIL_LIBDIR MATCHES "^lib/[^/]+-linux-[^/]+$")
    message(FATAL_ERROR "rerail: this build installs libraries into "
      "${CPACK_RERAIL_INSTALL_PREFIX}/${CPACK_RERAIL_LIBDIR}, not the multiarch directory NCCL's "
      "loader searches; configure with -DCMAKE_INSTALL_PREFIX=/usr, or run tools/package/build-deb.sh")
  endif()
  if(NOT CPACK_RERAIL_EXTRAS STREQUAL "OFFOFF")
    message(FATAL_ERROR "rerail: this build includes the test harness or benchmarks, which do not "
      "belong in the package; configure with -DRERAIL_BUILD_TESTS=OFF -DRERAIL_BUILD_BENCH=OFF, "
      "or run tools/package/build-deb.sh")
  endif()
endif()
