# cmake -DREADME=path -DMAX_BYTES=n -P readme_check.cmake
file(SIZE ${README} size)
if(size GREATER MAX_BYTES)
  message(FATAL_ERROR "${README} is ${size} bytes, more than ${MAX_BYTES}: the README introduces, docs/ measures "
                      "(move tables to docs/bench-tables.md or another doc)")
endif()
file(READ ${README} text)
string(REPLACE ";" "," text "${text}")  # CMake lists split at ';'
# Every row of the status table names what kind of figure it holds.
string(FIND "${text}" "## Status" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no '## Status' section")
endif()
string(SUBSTRING "${text}" ${at} -1 status)
string(REGEX MATCH "\n\\| what \\| figure \\| kind \\|\n\\|---\\|---\\|---\\|\n(\\|[^\n]*\n)+" table "${status}")
if(NOT table)
  message(FATAL_ERROR "${README}: the status table (| what | figure | kind |) is missing")
endif()
string(REGEX MATCHALL "\n\\|[^\n]*" rows "${table}")
list(REMOVE_AT rows 0 1)
foreach(row ${rows})
  if(NOT row MATCHES "\\| [^|]*(measured|modeled|published|built)[^|]*\\|$")
    message(FATAL_ERROR "${README}: a status row whose kind column says none of measured, modeled, published: ${row}")
  endif()
endforeach()
# Local links ([text](path)) point at files of the repository. docs/engines.md comes from issue #32's
# branch (the Python package's engines page) and is allowed to be missing until it lands.
get_filename_component(top ${README} DIRECTORY)
string(REPLACE "](" "<link>" linked "${text}")  # no '[' or ']' in list items: CMake pairs them
string(REGEX MATCHALL "<link>[^)#:]+\\)" links "${linked}")
foreach(l ${links})
  string(REGEX REPLACE "^<link>([^)]+)\\)$" "\\1" path "${l}")
  if(NOT EXISTS ${top}/${path} AND NOT path STREQUAL "docs/engines.md")
    message(FATAL_ERROR "${README}: link to ${path}, which does not exist")
  endif()
endforeach()
list(LENGTH rows n)
message(STATUS "README.md: ${size} bytes (max ${MAX_BYTES}), ${n} status rows labelled, local links alive")
