# install-unit.cmake — run by `cmake --install` (and CPack): writes the systemd
# unit packaging/crier.service.in with the paths of the prefix being installed
# to, and installs it (DESTDIR honoured). The CRIER_* variables come from the
# install(CODE) in CMakeLists.txt.
set(CRIER_BINDIR "${CMAKE_INSTALL_PREFIX}/${CRIER_INSTALL_BINDIR}")
set(CRIER_DOCDIR "${CMAKE_INSTALL_PREFIX}/${CRIER_INSTALL_DOCDIR}")
configure_file("${CRIER_UNIT_IN}" "${CRIER_UNIT_OUT}" @ONLY)
file(INSTALL "${CRIER_UNIT_OUT}" DESTINATION "${CMAKE_INSTALL_PREFIX}/${CRIER_SYSTEMD_UNIT_DIR}")
