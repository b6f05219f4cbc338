# SPDX-License-Identifier: Apache-2.0
# Link gRPC, protobuf and abseil from their static archives (Debian's -dev
# packages ship both forms).
#
# Why: `distcc-cuda` starts once per compile (the launcher a build tool runs
# in place of nvcc), and a start against ~75 shared libraries (gRPC, protobuf,
# some 70 of abseil) spent 16 of its 23 ms of CPU in the dynamic loader's
# symbol lookups and mappings (`perf stat -r 20 distcc-cuda --version`: 23 ms
# dynamic, 6 ms with the archives). The other dependencies (OpenSSL, zlib,
# c-ares, re2, spdlog, ...) stay shared: a handful of libraries, and OpenSSL
# keeps its security updates from the system.
#
# DISTCC_CUDA_STATIC_ARCHIVES=OFF links everything shared, as before.
option(DISTCC_CUDA_STATIC_ARCHIVES "link gRPC, protobuf and abseil statically" ON)

# The archive beside a shared library: /x/libfoo.so[.1.2.3] -> /x/libfoo.a,
# or "" when there is none.
function(distcc_archive_of shared out)
  set(${out} "" PARENT_SCOPE)
  # (Two ifs: ${CMAKE_MATCH_1} is expanded before its own if runs.)
  if(shared MATCHES "^(.*)\\.so(\\.[0-9.]+)?$")
    if(EXISTS "${CMAKE_MATCH_1}.a")
      set(${out} "${CMAKE_MATCH_1}.a" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# Points every imported library target named NAMESPACE::* (made in this
# directory by find_package) at its archive; a target without one is left
# shared, and said so.
function(distcc_link_archives_of)
  if(NOT DISTCC_CUDA_STATIC_ARCHIVES)
    return()
  endif()
  get_directory_property(imported IMPORTED_TARGETS)
  set(swapped 0)
  set(kept "")
  foreach(target IN LISTS imported)
    set(wanted FALSE)
    foreach(namespace IN LISTS ARGN)
      if(target MATCHES "^${namespace}::")
        set(wanted TRUE)
      endif()
    endforeach()
    get_target_property(type ${target} TYPE)
    if(NOT wanted OR type STREQUAL "EXECUTABLE" OR type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE
        IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
      get_target_property(location ${target} ${property})
      if(NOT location)
        continue()
      endif()
      distcc_archive_of("${location}" archive)
      if(archive)
        set_target_properties(${target} PROPERTIES ${property} "${archive}")
        string(REPLACE "IMPORTED_LOCATION" "IMPORTED_SONAME" soname ${property})
        set_property(TARGET ${target} PROPERTY ${soname})
        math(EXPR swapped "${swapped} + 1")
      elseif(location MATCHES "\\.so")
        list(APPEND kept ${target})
      endif()
    endforeach()
  endforeach()
  message(STATUS "Static archives: ${swapped} libraries of ${ARGN}")
  if(kept)
    message(STATUS "Static archives: no archive for ${kept}; linked shared")
  endif()
endfunction()

# Points each library in the INTERFACE_LINK_LIBRARIES of the given interface
# targets (pkg-config's PkgConfig::*, gRPC's re2::re2) at its archive: a file
# at the archive beside it, a -lNAME at libNAME.a. One without an archive is
# left as it was, and said so.
function(distcc_link_interface_archives)
  foreach(target IN LISTS ARGN)
    get_target_property(items ${target} INTERFACE_LINK_LIBRARIES)
    set(swapped "")
    foreach(item IN LISTS items)
      set(archive "")
      if(item MATCHES "^-l(.+)$")
        find_library(DISTCC_ARCHIVE_${CMAKE_MATCH_1} NAMES lib${CMAKE_MATCH_1}.a)
        if(DISTCC_ARCHIVE_${CMAKE_MATCH_1})
          set(archive "${DISTCC_ARCHIVE_${CMAKE_MATCH_1}}")
        endif()
      else()
        distcc_archive_of("${item}" archive)
      endif()
      if(archive)
        list(APPEND swapped "${archive}")
      else()
        if(item MATCHES "^-l|\\.so")
          message(STATUS "Static archives: no archive for ${item} of ${target}; linked shared")
        endif()
        list(APPEND swapped "${item}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${swapped}")
  endforeach()
endfunction()
