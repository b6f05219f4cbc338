# SPDX-License-Identifier: Apache-2.0
# Writes OUTPUT, a C++ file that holds the dashboard's files (DIR/index.html,
# dashboard.js, dashboard.css) as strings: the coordinator serves them from
# its own binary, nothing is fetched from anywhere. Run by the build
# (coordinator/dashboard/CMakeLists.txt) whenever one of them changes.
set(body "// Generated from coordinator/dashboard by embed.cmake: edit those files.\n")
string(APPEND body "#include \"coordinator/dashboard/dashboard_assets.h\"\n\n")
string(APPEND body "namespace distcc_cuda::coordinator {\n\n")
string(APPEND body "const std::vector<DashboardAsset>& DashboardAssets() {\n")
string(APPEND body "  static const std::vector<DashboardAsset> kAssets = {\n")
# embed(PATH FILE TYPE): PATH served from DIR/FILE as TYPE. (A content
# type holds ';', CMake's list separator: hence a function, not a list.)
function(embed path file type)
  file(READ "${DIR}/${file}" content)
  if(content MATCHES "\\)distcc_asset\"")
    message(FATAL_ERROR "${file} holds the raw string's delimiter")
  endif()
  string(APPEND body "      {\"${path}\", \"${type}\", R\"distcc_asset(${content})distcc_asset\"},\n")
  set(body "${body}" PARENT_SCOPE)
endfunction()
embed("/" index.html "text/html; charset=utf-8")
embed("/dashboard.js" dashboard.js "text/javascript; charset=utf-8")
embed("/dashboard.css" dashboard.css "text/css; charset=utf-8")
string(APPEND body "  };\n  return kAssets;\n}\n\n}  // namespace distcc_cuda::coordinator\n")
file(WRITE "${OUTPUT}.new" "${body}")
file(RENAME "${OUTPUT}.new" "${OUTPUT}")
