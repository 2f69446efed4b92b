# cmake -DBUILD_DIR= -DWORK_DIR= -DEXAMPLES_DIR= -DCATALOG= -DPKG_CONFIG= -DCC= -DGENERATOR= -P check_install.cmake
# Installs the project into WORK_DIR/prefix, builds examples/ against it twice (CMake's
# find_package(mla_runtime), then `cc $(pkg-config --cflags --libs mla_runtime)`), and runs both
# builds on the emulator backend, whose plugin they must find next to the installed library.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "${cmd}: exit ${rc}\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/mla/mla_runtime.h lib/libmla_runtime.so lib/libmla_runtime_emulator.so
          lib/cmake/mla_runtime/mla_runtimeConfig.cmake lib/cmake/mla_runtime/mla_runtimeTargets.cmake
          lib/pkgconfig/mla_runtime.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()

# The HIP test device (tests/hip_test_device, a libamdhip64.so over the emulator) is a test
# fixture: it must never be installed.
file(GLOB_RECURSE hip_libs ${prefix}/*libamdhip64*)
if(hip_libs)
  message(FATAL_ERROR "cmake --install installed the HIP test device: ${hip_libs}")
endif()

# find_package(mla_runtime) -> mla::runtime
run(${CMAKE_COMMAND} -S ${EXAMPLES_DIR} -B ${WORK_DIR}/examples -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/examples)

# pkg-config
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig ${PKG_CONFIG} --cflags --libs mla_runtime)
string(STRIP "${run_out}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
message(STATUS "pkg-config --cflags --libs mla_runtime: ${pc_flags}")
run(${CC} ${EXAMPLES_DIR}/mla_example.c ${pc_flags} -Wl,-rpath,${prefix}/lib -o ${WORK_DIR}/mla_example_pc)

foreach(exe ${WORK_DIR}/examples/mla_example ${WORK_DIR}/mla_example_pc)
  run(${CMAKE_COMMAND} -E env --unset=MLA_EMULATOR_LIB --unset=LD_LIBRARY_PATH MLA_CATALOG_DIR=${CATALOG}
      MLA_EMULATOR_TARGET=gfx942 ${exe} --emulator)
  message(STATUS "${exe}:\n${run_out}")
  if(NOT run_out MATCHES "mla_decode_fp8fp8_h16_qs1_pg16" OR NOT run_out MATCHES "0 non-finite" OR NOT run_out MATCHES "ok")
    message(FATAL_ERROR "${exe} --emulator did not run the batch:\n${run_out}")
  endif()
  run(ldd ${exe})
  if(NOT run_out MATCHES "${prefix}/lib/libmla_runtime.so")
    message(FATAL_ERROR "${exe} does not use the installed libmla_runtime.so:\n${run_out}")
  endif()
endforeach()
