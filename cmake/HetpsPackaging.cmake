# `cmake --install` puts ps-server, the client library with its public headers and an exported
# CMake package in place, so a training job's own project can do:
#
#   find_package(hetps REQUIRED)
#   target_link_libraries(train PRIVATE hetps::client)

include(CMakePackageConfigHelpers)

set(HETPS_PUBLIC_HEADERS worker/client.h worker/options.h worker/device_client.h worker/local_group.h)
foreach(header ${HETPS_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hetps/${dir})
endforeach()

# The client is a static library; the internal libraries it is built from travel with it.
foreach(library client device_client transport common proto)
  set_target_properties(hetps_${library} PROPERTIES EXPORT_NAME ${library})
endforeach()
install(TARGETS hetps_client hetps_transport hetps_common hetps_proto
  EXPORT hetpsTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT hetpsTargets NAMESPACE hetps:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hetps)
# Apart: the device client brings CUDA (and NCCL) where it was built with them, which a
# consumer of hetps::client alone must not need (hetpsConfig.cmake loads it only if it can).
install(TARGETS hetps_device_client
  EXPORT hetpsDeviceTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT hetpsDeviceTargets NAMESPACE hetps::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hetps)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hetpsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hetpsConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hetps)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hetpsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hetpsConfig.cmake ${PROJECT_BINARY_DIR}/hetpsConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hetps)
