# Small helpers so every target gets the same include root, warnings and sanitizer flags.
#
#   hetps_cc_library(NAME <name> SRCS ... [DEPS ...] [PUBLIC_DEPS ...])  -> target hetps_<name>
#   hetps_cc_binary(NAME <name> SRCS ... [DEPS ...] [OUTPUT_NAME <file>])
#   hetps_cc_test(NAME <name> SRCS ... [DEPS ...] [TIMEOUT <s>] [LABELS ...])

set(HETPS_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 reports false maybe-uninitialized warnings inside Abseil containers, and at -O3 false
# restrict warnings inside std::string (assigning or prepending a literal: GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND HETPS_WARNINGS -Wno-maybe-uninitialized -Wno-restrict)
endif()
# Warnings stop the build only where the project's own CI and developers ask for it: another
# compiler or optimisation level finds new (often false) warnings, and a user's build must not
# fail on them.
option(HETPS_WERROR "Treat compiler warnings as errors (.ci/run turns this on)" OFF)
if(HETPS_WERROR)
  list(APPEND HETPS_WARNINGS -Werror)
endif()
# The fuzzing build (tests/fuzz/run.sh): clang only; all code is instrumented for libFuzzer's
# coverage and the targets in tests/fuzz/ link libFuzzer. Used with HETPS_SANITIZE=ON.
option(HETPS_FUZZ "Build tests/fuzz targets with libFuzzer (needs clang)" OFF)
if(HETPS_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "HETPS_FUZZ=ON needs clang (e.g. CXX=clang++-15)")
endif()
set(HETPS_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
                          -fno-sanitize-recover=undefined)

function(hetps_apply_common_flags target)
  # C++ only: nvcc takes other flags (the CUDA sources are a few small kernels).
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HETPS_WARNINGS}>)
  if(HETPS_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HETPS_SANITIZER_FLAGS}>)
    target_link_options(${target} PRIVATE ${HETPS_SANITIZER_FLAGS})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/common/lsan_suppressions.cc)
    endif()
  endif()
  if(HETPS_FUZZ)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  endif()
endfunction()

function(hetps_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  set(target hetps_${ARG_NAME})
  add_library(${target} STATIC ${ARG_SRCS})
  add_library(hetps::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/hetps>)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
  hetps_apply_common_flags(${target})
endfunction()

function(hetps_cc_binary)
  cmake_parse_arguments(ARG "" "NAME;OUTPUT_NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  if(ARG_OUTPUT_NAME)
    set_target_properties(${ARG_NAME} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
  hetps_apply_common_flags(${ARG_NAME})
endfunction()

# Each GoogleTest case becomes its own ctest entry (so ctest -j spreads them and each has its
# own timeout). Tests find the project's binaries through HETPS_BINARY_DIR.
function(hetps_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  hetps_apply_common_flags(${ARG_NAME})
  set(properties TIMEOUT ${ARG_TIMEOUT}
                 ENVIRONMENT "HETPS_BINARY_DIR=${PROJECT_BINARY_DIR};${HETPS_TEST_ENVIRONMENT}")
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 30
    PROPERTIES ${properties})
endfunction()
