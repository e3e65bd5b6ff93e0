# What `cmake --install` lays down beyond the targets, and the Debian package (`cpack -G DEB`,
# scripts/check-deb.sh). Configure with CMAKE_INSTALL_PREFIX=/usr for the package: the config
# then goes to /etc/irisd (a conffile), the Python package to Python's dist-packages.

# The unit names the installed binary and config.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(IRIS_CONFIG_DIR /etc/irisd)
  set(IRIS_PYTHON_DIR lib/python3/dist-packages)
else()
  set(IRIS_CONFIG_DIR ${CMAKE_INSTALL_SYSCONFDIR}/irisd)
  set(IRIS_PYTHON_DIR ${CMAKE_INSTALL_DATADIR}/iris/python)
endif()
# systemd reads units, sysusers.d and tmpfiles.d from PREFIX/lib, never from a multiarch lib.
set(IRIS_SYSTEMD_DIR lib/systemd/system)
file(READ ${PROJECT_SOURCE_DIR}/deploy/irisd.service IRIS_UNIT)
string(REPLACE "/usr/sbin/irisd" "${CMAKE_INSTALL_FULL_SBINDIR}/irisd" IRIS_UNIT "${IRIS_UNIT}")
string(REPLACE "/etc/irisd" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/irisd" IRIS_UNIT "${IRIS_UNIT}")
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/irisd.service CONTENT "${IRIS_UNIT}")

install(FILES ${PROJECT_BINARY_DIR}/irisd.service DESTINATION ${IRIS_SYSTEMD_DIR})
install(FILES deploy/irisd.toml DESTINATION ${IRIS_CONFIG_DIR})
install(FILES deploy/irisd.sysusers DESTINATION lib/sysusers.d
        RENAME irisd.conf)
install(FILES deploy/irisd.tmpfiles DESTINATION lib/tmpfiles.d
        RENAME irisd.conf)
install(DIRECTORY client/python/irisd DESTINATION ${IRIS_PYTHON_DIR} PATTERN __pycache__ EXCLUDE)
install(FILES README.md docs/ARCHITECTURE.md docs/OPERATIONS.md docs/PERFORMANCE.md docs/MI300.md
              docs/NCCL.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/irisd)
install(FILES deploy/prometheus/prometheus.yml deploy/prometheus/irisd-alerts.yml
              deploy/prometheus/irisd-alerts.test.yml deploy/irisd-daemonset.yaml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/irisd/examples)

set(CPACK_PACKAGE_NAME irisd)
set(CPACK_PACKAGE_VENDOR "irisd developers")
set(CPACK_PACKAGE_CONTACT "irisd developers <irisd@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "collectives on GPU copy engines: daemon, client library, iris-ctl")
set(CPACK_PACKAGE_DESCRIPTION
    "irisd runs all-gather, all-to-all and the other copy-only collectives on the GPUs' DMA copy engines, so that compute units stay with the GEMMs. The package holds irisd (with its systemd unit), iris-ctl, libiris with headers and CMake package, the Python binding, and a libnccl.so.2 with NCCL's C API over irisd (under LIBDIR/irisd-nccl, for LD_PRELOAD or the library path), with its RCCL build librccl.so.1 for AMD GPUs (LIBDIR/irisd-rccl).")
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# procps: the unit's ExecReload runs /bin/kill (found missing in a debootstrap minbase root).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd | systemd-standalone-sysusers, procps")
# Loaded at run time, so dpkg-shlibdeps does not see it: communicators across nodes need it.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libucx0")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GENERATOR DEB)
include(CPack)
