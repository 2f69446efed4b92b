# cmake -DEXAMPLE= -DDEVICE_LIB_DIR= -DCATALOG= -DTRACE= -P compare_example.cmake
# examples/mla_example on its default backend (HIP), which finds the HIP test device first on
# the loader path, against `mla_example --emulator`: every printed line but the device's name
# must be the same (the plan, the kernels, the output's checksum), and the device's trace must
# show the decode kernel launched on it.
function(run out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "${cmd}: exit ${rc}\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE ${TRACE})
# LD_LIBRARY_PATH rather than ROCM_PATH: the runtime tries libamdhip64.so on the loader path
# before $ROCM_PATH/lib, and Debian's libamdhip64-dev puts its own there.
run(hip ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${DEVICE_LIB_DIR} MLA_HIP_TEST_DEVICE_TARGET=gfx942
    MLA_HIP_TRACE=${TRACE} MLA_CATALOG_DIR=${CATALOG} ${EXAMPLE})
run(emu ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH MLA_EMULATOR_TARGET=gfx942 MLA_CATALOG_DIR=${CATALOG}
    ${EXAMPLE} --emulator)
message(STATUS "mla_example (HIP backend, HIP test device):\n${hip}")
message(STATUS "mla_example --emulator:\n${emu}")

if(NOT hip MATCHES "device: MLA HIP test device \\(emulator gfx942\\) \\(gfx942, 304 CUs\\)")
  message(FATAL_ERROR "the HIP run did not open the HIP test device")
endif()
string(REGEX REPLACE "device: [^\n]*\n" "" hip_rest "${hip}")
string(REGEX REPLACE "device: [^\n]*\n" "" emu_rest "${emu}")
if(NOT hip_rest STREQUAL emu_rest)
  message(FATAL_ERROR "mla_example prints different results on the HIP backend and the emulator backend")
endif()
if(NOT hip_rest MATCHES "checksum" OR NOT hip_rest MATCHES "ok\n")
  message(FATAL_ERROR "mla_example did not print its checksum and ok")
endif()

file(STRINGS ${TRACE} lines)
set(launches 0)
foreach(l IN LISTS lines)
  if(l MATCHES "-> hipError")
    message(FATAL_ERROR "a HIP call failed on the test device: ${l}")
  endif()
  if(l MATCHES "^hipModuleLaunchKernel stream=0 function=mla_decode_fp8fp8_h16_qs1_pg16 .* -> hipSuccess$")
    math(EXPR launches "${launches} + 1")
  endif()
endforeach()
if(NOT launches EQUAL 1)
  message(FATAL_ERROR "the trace has ${launches} launches of the decode kernel (want 1):\n${lines}")
endif()
