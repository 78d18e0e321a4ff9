# Installable package: find_package(flashjit) gives flashjit::flashjit.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS flashjit EXPORT flashjitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY engine/include/flashjit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashjitTargets NAMESPACE flashjit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashjit)
configure_package_config_file(cmake/flashjitConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashjitConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashjit)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashjitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashjitConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashjitConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashjit)
