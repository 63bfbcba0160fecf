# `cmake --install BUILD [--prefix P]`: the binaries, the systemd unit and the default
# configuration, and the client SDK an engine links against (docs/sdk.md):
#   P/bin/kvdepotd, P/bin/kvdepot
#   P/etc/kvdepot/kvdepot.yaml                    (config/kvdepot.yaml; an existing file is kept)
#   P/${KVDEPOT_SYSTEMD_UNITDIR}/kvdepotd.service (systemd/kvdepotd.service, with /usr/local/
#                                                  replaced by P/ so that it runs what was installed)
#   P/include/kvdepot/...                         (the public headers of base/, codec/,
#                                                  protocol/, client/, cuda/)
#   P/lib/libkvdepot_{base,codec,protocol,client,cuda,client_gpu}.a, P/lib/libkvdepot_lmcache.so
#   P/lib/cmake/kvdepot/                          (find_package(kvdepot): kvdepot::base,
#                                                  kvdepot::codec, kvdepot::protocol,
#                                                  kvdepot::client, with CUDA kvdepot::cuda and
#                                                  kvdepot::client_gpu)
include(CMakePackageConfigHelpers)
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

# ---- the client SDK ----
set(_kvd_sdk_targets kvdepot_base kvdepot_codec kvdepot_protocol kvdepot_cluster_topology
                      kvdepot_client)
set(_kvd_sdk_headers ${PROJECT_SOURCE_DIR}/base/include/ ${PROJECT_SOURCE_DIR}/codec/include/
                      ${PROJECT_SOURCE_DIR}/protocol/include/ ${PROJECT_SOURCE_DIR}/client/include/
                      ${PROJECT_SOURCE_DIR}/cluster/include/)
if(KVDEPOT_WITH_CUDA)
  list(APPEND _kvd_sdk_targets kvdepot_cuda kvdepot_client_gpu)
  list(APPEND _kvd_sdk_headers ${PROJECT_SOURCE_DIR}/cuda/include/)
endif()
install(TARGETS ${_kvd_sdk_targets} EXPORT kvdepotTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${_kvd_sdk_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(TARGETS kvdepot_lmcache LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(_kvd_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/kvdepot)
install(EXPORT kvdepotTargets NAMESPACE kvdepot:: DESTINATION ${_kvd_cmakedir})
set(KVDEPOT_SDK_WITH_CUDA ${KVDEPOT_WITH_CUDA})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvdepotConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/kvdepotConfig.cmake
                              INSTALL_DESTINATION ${_kvd_cmakedir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/kvdepotConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/kvdepotConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/kvdepotConfigVersion.cmake
        DESTINATION ${_kvd_cmakedir})
