# SPDX-License-Identifier: Apache-2.0
# DISTCC_CUDA_PORTABLE: programs that need nothing of the machine they run on
# but glibc, for the wheel (pyproject.toml turns it on) and the images.
#
# `pip install distcc-cuda` must give working programs on a machine that has
# none of the build's -dev packages, and the launcher (`distcc-cuda`, started
# once per compile) must stay a plain ELF program: auditwheel moves a program
# that needs a bundled shared library out of the venv's bin/ and puts a
# Python script in its place, which would add Python's start to every
# compile. So every library is linked in:
#   - gRPC, protobuf, abseil, OpenSSL, zlib, c-ares, re2, lz4, zstd from the
#     static archives Debian's -dev packages ship (StaticArchives.cmake);
#   - spdlog, fmt and toml++ in their header-only forms (Debian ships no
#     archives of them);
#   - prometheus-cpp's core and civetweb, of which Debian ships neither an
#     archive nor a header-only form, compiled here from the upstream source
#     tarballs that Debian's own packages are built from (the same releases
#     as bookworm's packages, fetched from Debian's archive and checked by
#     SHA-256; FETCHCONTENT_SOURCE_DIR_PROMETHEUS_CPP / _CIVETWEB name an
#     unpacked copy instead, for a build without network);
#   - libstdc++ and libgcc statically (-static-libstdc++), so that the
#     programs do not need the C++ runtime of the compiler that built them.
# OpenSSL linked in no longer takes the system's security updates: a new
# wheel or image does. The certificates the programs use are the cluster's
# own (mutual TLS with the cluster's CA), not the system's trust store.

include(FetchContent)

set(DISTCC_PROMETHEUS_CPP_URL
  "http://deb.debian.org/debian/pool/main/p/prometheus-cpp/prometheus-cpp_1.0.1.orig.tar.gz"
  CACHE STRING "prometheus-cpp 1.0.1 source tarball (DISTCC_CUDA_PORTABLE)")
set(DISTCC_CIVETWEB_URL
  "http://deb.debian.org/debian/pool/main/c/civetweb/civetweb_1.15+dfsg.orig.tar.xz"
  CACHE STRING "civetweb 1.15 source tarball (DISTCC_CUDA_PORTABLE)")

# A tarball over plain HTTP is safe to use only because its digest is fixed
# here.
FetchContent_Declare(prometheus_cpp
  URL ${DISTCC_PROMETHEUS_CPP_URL}
  URL_HASH SHA256=593e028d401d3298eada804d252bc38d8cab3ea1c9e88bcd72095281f85e6d16
  DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
FetchContent_Declare(civetweb
  URL ${DISTCC_CIVETWEB_URL}
  URL_HASH SHA256=ec372e9737bc820118bbb735f46a07d41f795814ca0f38bc6e67048e7a460f33
  DOWNLOAD_EXTRACT_TIMESTAMP TRUE)

# prometheus-cpp's own CMake build of its core only: no pull (its own
# civetweb), push (curl), compression or tests; static; our C++ standard.
FetchContent_GetProperties(prometheus_cpp)
if(NOT prometheus_cpp_POPULATED)
  FetchContent_Populate(prometheus_cpp)
  set(ENABLE_PULL OFF CACHE BOOL "" FORCE)
  set(ENABLE_PUSH OFF CACHE BOOL "" FORCE)
  set(ENABLE_COMPRESSION OFF CACHE BOOL "" FORCE)
  set(ENABLE_TESTING OFF CACHE BOOL "" FORCE)
  set(GENERATE_PKGCONFIG OFF CACHE BOOL "" FORCE)
  set(OVERRIDE_CXX_STANDARD_FLAGS OFF CACHE BOOL "" FORCE)
  set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
  add_subdirectory(${prometheus_cpp_SOURCE_DIR} ${prometheus_cpp_BINARY_DIR} EXCLUDE_FROM_ALL)
endif()

# civetweb is one C file; its own CMake build drags in far more than the
# HTTP server common/transport/http_server.cc uses (plain HTTP on loopback or a
# listed address, no TLS, no CGI, no files served).
FetchContent_GetProperties(civetweb)
if(NOT civetweb_POPULATED)
  FetchContent_Populate(civetweb)
endif()
enable_language(C)
add_library(distcc_civetweb STATIC ${civetweb_SOURCE_DIR}/src/civetweb.c)
target_include_directories(distcc_civetweb SYSTEM PUBLIC ${civetweb_SOURCE_DIR}/include)
target_compile_definitions(distcc_civetweb PRIVATE NO_SSL NO_CGI NO_CACHING USE_IPV6 NDEBUG)
target_compile_options(distcc_civetweb PRIVATE -w)
target_link_libraries(distcc_civetweb PUBLIC Threads::Threads)
add_library(civetweb::civetweb ALIAS distcc_civetweb)

# Header-only spdlog over header-only fmt, and header-only toml++, under the
# names the rest of the build links.
find_package(fmt CONFIG REQUIRED)
get_target_property(fmt_includes fmt::fmt-header-only INTERFACE_INCLUDE_DIRECTORIES)
add_library(spdlog::spdlog INTERFACE IMPORTED)
set_target_properties(spdlog::spdlog PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY=1"
  INTERFACE_INCLUDE_DIRECTORIES "${fmt_includes}"
  INTERFACE_LINK_LIBRARIES Threads::Threads)
find_path(DISTCC_TOMLPLUSPLUS_INCLUDE toml++/toml.h REQUIRED)
add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1"
  INTERFACE_INCLUDE_DIRECTORIES "${DISTCC_TOMLPLUSPLUS_INCLUDE}")

# The C++ runtime inside each program.
add_link_options(-static-libstdc++ -static-libgcc)

# OpenSSL's archive (swapped in by distcc_link_archives_of) needs what its
# shared library would have brought along.
set_property(TARGET OpenSSL::Crypto APPEND PROPERTY INTERFACE_LINK_LIBRARIES
  ${CMAKE_DL_LIBS} Threads::Threads)
