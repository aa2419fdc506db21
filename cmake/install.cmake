# Install rules: the shared library (SONAME libwna16.so.MAJOR), the static
# archive, the one public header, the tool with its man page, the demo's
# tokenizer, docs, a pkg-config file and a CMake package (wna16::wna16).
include(CMakePackageConfigHelpers)

install(TARGETS wna16_shared EXPORT wna16Targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS wna16_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The MPI plug-in beside the library, where the core's loader looks first.
if(TARGET wna16_mpi)
  install(TARGETS wna16_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(FILES ${PROJECT_SOURCE_DIR}/include/wna16.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(wna16_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/wna16)
install(EXPORT wna16Targets NAMESPACE wna16:: DESTINATION ${wna16_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/wna16Config.cmake.in
                              ${PROJECT_BINARY_DIR}/wna16Config.cmake
                              INSTALL_DESTINATION ${wna16_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wna16ConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wna16Config.cmake ${PROJECT_BINARY_DIR}/wna16ConfigVersion.cmake
        DESTINATION ${wna16_cmake_dir})

# pkg-config: the shared library needs nothing else on the link line; a
# static link (pkg-config --static) adds the dependencies.
set(WNA16_PC_LIBS_PRIVATE "-lpthread -lm -ldl")
configure_file(${PROJECT_SOURCE_DIR}/cmake/wna16.pc.in ${PROJECT_BINARY_DIR}/wna16.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/wna16.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/tests/data/tokenizer/qwen3
        DESTINATION ${CMAKE_INSTALL_DATADIR}/wna16/tokenizer)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

if(WNA16_BUILD_TOOL)
  install(TARGETS wna16 RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # The man page is made from the same text as `wna16 --help`.
  find_program(HELP2MAN help2man)
  if(HELP2MAN)
    add_custom_command(
      OUTPUT ${PROJECT_BINARY_DIR}/wna16.1
      COMMAND ${HELP2MAN} --no-info --no-discard-stderr
              --name "WNA16 (int4/int8 weight, 16-bit activation) inference on CPU"
              --output ${PROJECT_BINARY_DIR}/wna16.1 $<TARGET_FILE:wna16>
      DEPENDS wna16 VERBATIM)
    add_custom_target(wna16_man ALL DEPENDS ${PROJECT_BINARY_DIR}/wna16.1)
    install(FILES ${PROJECT_BINARY_DIR}/wna16.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  else()
    message(STATUS "wna16: help2man not found; the man page is not built")
  endif()
endif()
