# Packaging (included by the top CMakeLists.txt): rerail.pc, the Debian
# changelog and copyright, and the .deb CPack makes. A package build is
# tools/package/build-deb.sh; the guard in cpack_guard.cmake refuses a build
# configured otherwise, since its .deb would put the plugins where NCCL's
# loader does not look or carry the test programs.
set(RERAIL_PKG_DIR ${CMAKE_CURRENT_LIST_DIR})

# rerail.pc: the public headers (the health table's layout first of all) for
# dashboards and other readers, with the layout version the header defines.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/rerail/health_table.h RERAIL_HT_VERSION
     REGEX "^#define RR_HT_VERSION [0-9]+u?$")
string(REGEX REPLACE "^#define RR_HT_VERSION ([0-9]+)u?$" "\\1" RERAIL_HT_VERSION "${RERAIL_HT_VERSION}")
configure_file(${RERAIL_PKG_DIR}/rerail.pc.in ${PROJECT_BINARY_DIR}/rerail.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rerail.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Debian's changelog and copyright. The changelog's newest entry must name the
# version the package gets, or dpkg and lintian would disagree with it.
set(RERAIL_DEB_RELEASE 1)
file(STRINGS ${RERAIL_PKG_DIR}/debian/changelog RERAIL_CHANGELOG_TOP LIMIT_COUNT 1)
if(NOT RERAIL_CHANGELOG_TOP MATCHES "^rerail \\(${PROJECT_VERSION}-${RERAIL_DEB_RELEASE}\\) ")
  message(FATAL_ERROR "tools/package/debian/changelog: the newest entry must be "
          "${PROJECT_VERSION}-${RERAIL_DEB_RELEASE} (project version - Debian release), "
          "found: ${RERAIL_CHANGELOG_TOP}")
endif()
# gzip -n: no name or time stamp inside, so two builds give the same bytes.
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/changelog.Debian.gz
  COMMAND gzip -9nc ${RERAIL_PKG_DIR}/debian/changelog > ${PROJECT_BINARY_DIR}/changelog.Debian.gz
  DEPENDS ${RERAIL_PKG_DIR}/debian/changelog VERBATIM)
add_custom_target(rerail_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/changelog.Debian.gz)
install(FILES ${PROJECT_BINARY_DIR}/changelog.Debian.gz ${RERAIL_PKG_DIR}/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rerail)
install(FILES ${RERAIL_PKG_DIR}/debian/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME rerail)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rerail)
set(CPACK_PACKAGE_CONTACT "rerail engineers <eng@rerail.dev>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "NCCL net and tuner plugins that survive NIC failures")
# Lines of at most 80 columns: dpkg shows them as they are.
set(CPACK_PACKAGE_DESCRIPTION "rerail keeps NCCL jobs running when NICs, ports, cables or optics
fail. The net plugin pools the host's NICs and moves a connection's traffic
to a backup rail, without loss, when its rail fails; the tuner plugin leaves
NCCL's choices as they are for now.
Enable both with NCCL_NET_PLUGIN=rerail and NCCL_TUNER_PLUGIN=rerail.
The rerail tool shows the host's NIC health; rerail.pc locates the health
table's header for other readers.")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://rerail.dev")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${RERAIL_DEB_RELEASE})
# Depends from what the binaries link (dpkg-shlibdeps: libc6, libnuma1);
# libibverbs is dlopen()ed when present, so it is only recommended.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs1")
set(CPACK_STRIP_FILES ON)
# The loader's cache learns of the libraries through libc's ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${RERAIL_PKG_DIR}/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# What the guard checks at cpack time (CPACK_* variables reach it).
set(CPACK_RERAIL_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_RERAIL_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
set(CPACK_RERAIL_EXTRAS "${RERAIL_BUILD_TESTS}${RERAIL_BUILD_BENCH}")
set(CPACK_PROJECT_CONFIG_FILE ${RERAIL_PKG_DIR}/cpack_guard.cmake)
include(CPack)
