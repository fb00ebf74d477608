# Finds hetps's dependencies the way Debian 12 ships them (see DESIGN.md, build notes) and resolves
# the AUTO/ON/OFF feature options into HETPS_HAVE_<NAME> (ON only when found and not disabled).

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)  # module mode: Debian ships no protobuf config file
find_package(gRPC CONFIG REQUIRED)

set(HETPS_SANITIZE OFF CACHE BOOL "Build everything with AddressSanitizer and UndefinedBehaviorSanitizer")

# hetps_feature_option(<NAME> <FOUND> <description>): a cache option NAME that is AUTO, ON or OFF.
# AUTO follows FOUND; ON without FOUND is a configuration error.
function(hetps_feature_option name found description)
  set(${name} AUTO CACHE STRING "${description} (AUTO: on when found)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(REPLACE "HETPS_WITH_" "HETPS_HAVE_" have_var "${name}")
  if(${name} STREQUAL "OFF")
    set(have OFF)
  elseif(${found})
    set(have ON)
  elseif(${name} STREQUAL "ON")
    message(FATAL_ERROR "${name}=ON but it was not found")
  else()
    set(have OFF)
  endif()
  set(${have_var} ${have} PARENT_SCOPE)
endfunction()

# UCX: the transport/ucx/ transport; without it hetps speaks gRPC only.
find_package(ucx CONFIG QUIET)
hetps_feature_option(HETPS_WITH_UCX "${ucx_FOUND}" "UCX transport")

find_package(CUDAToolkit QUIET)
hetps_feature_option(HETPS_WITH_CUDA "${CUDAToolkit_FOUND}" "CUDA device buffers in the worker")

set(nccl_found OFF)
if(CUDAToolkit_FOUND)
  find_path(HETPS_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(HETPS_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(HETPS_NCCL_INCLUDE_DIR AND HETPS_NCCL_LIBRARY)
    set(nccl_found ON)
  endif()
endif()
hetps_feature_option(HETPS_WITH_NCCL "${nccl_found}" "NCCL across the GPUs of one machine")

# jemalloc backs the server's tensor memory. The sanitizers bring their own allocator, so the two
# are never combined.
pkg_check_modules(JEMALLOC IMPORTED_TARGET jemalloc)
if(JEMALLOC_FOUND AND NOT HETPS_SANITIZE)
  set(HETPS_HAVE_JEMALLOC ON)
else()
  set(HETPS_HAVE_JEMALLOC OFF)
endif()

# The Python module (python/): pybind11 and the interpreter that has Debian's python3-torch
# (/usr/bin/python3; the image's default python3 may be another one). -DPython_EXECUTABLE=...
# picks another.
if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python COMPONENTS Interpreter Development.Module QUIET)
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 CONFIG QUIET)
set(python_found OFF)
# Not under the sanitizers: the interpreter would need their runtime preloaded.
if(Python_FOUND AND pybind11_FOUND AND NOT HETPS_SANITIZE)
  set(python_found ON)
endif()
hetps_feature_option(HETPS_WITH_PYTHON "${python_found}" "the Python module (pybind11)")

find_package(GTest CONFIG)
find_package(benchmark CONFIG QUIET)
