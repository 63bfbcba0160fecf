# `cmake --install BUILD [--prefix P]`: the binaries, the systemd unit and the default
# configuration:
#   P/bin/kvdepotd, P/bin/kvdepot
#   P/etc/kvdepot/kvdepot.yaml                    (config/kvdepot.yaml; an existing file is kept)
#   P/${KVDEPOT_SYSTEMD_UNITDIR}/kvdepotd.service (systemd/kvdepotd.service, with /usr/local/
#                                                  replaced by P/ so that it runs what was installed)
include(GNUInstallDirs)
set(KVDEPOT_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit goes, relative to the install prefix")

install(TARGETS kvdepotd kvdepot RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(_kvd_conf "${PROJECT_SOURCE_DIR}/config/kvdepot.yaml")
set(_kvd_unit "${PROJECT_SOURCE_DIR}/systemd/kvdepotd.service")
# Evaluated at install time, so that --prefix is honoured.
install(CODE "
  set(_prefix \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  set(_conf \"\${_prefix}/${CMAKE_INSTALL_SYSCONFDIR}/kvdepot/kvdepot.yaml\")
  if(EXISTS \"\${_conf}\")
    message(STATUS \"Keeping: \${_conf}\")
  else()
    file(INSTALL \"${_kvd_conf}\" DESTINATION \"\${_prefix}/${CMAKE_INSTALL_SYSCONFDIR}/kvdepot\")
  endif()
  file(READ \"${_kvd_unit}\" _unit)
  string(REPLACE \"/usr/local/\" \"\${CMAKE_INSTALL_PREFIX}/\" _unit \"\${_unit}\")
  file(MAKE_DIRECTORY \"\${_prefix}/${KVDEPOT_SYSTEMD_UNITDIR}\")
  file(WRITE \"\${_prefix}/${KVDEPOT_SYSTEMD_UNITDIR}/kvdepotd.service\" \"\${_unit}\")
  message(STATUS \"Installing: \${_prefix}/${KVDEPOT_SYSTEMD_UNITDIR}/kvdepotd.service\")
")
