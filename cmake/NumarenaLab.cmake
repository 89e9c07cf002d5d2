# The NUMA lab in CTest: numarena_add_lab_test(target source) adds one test per topology,
#   lab.<target>.<topology>  =  cmake/lab/run.sh --topology <topology> -- <binary>
# labelled "lab". The topologies come from a "// lab-topologies: a b c" line in the source,
# default all four. run.sh boots QEMU (see cmake/lab/README.md) and returns the binary's
# exit status.
set(NUMARENA_LAB_TOPOLOGIES 2s snc4 cxl tiny)
set(NUMARENA_LAB_RUN ${CMAKE_CURRENT_LIST_DIR}/lab/run.sh)

function(numarena_add_lab_test target source)
  file(STRINGS ${source} spec REGEX "^// lab-topologies:")
  set(topologies ${NUMARENA_LAB_TOPOLOGIES})
  if(spec)
    string(REGEX REPLACE "^// lab-topologies:[ ]*" "" spec "${spec}")
    separate_arguments(topologies UNIX_COMMAND "${spec}")
  endif()
  foreach(topology ${topologies})
    add_test(NAME lab.${target}.${topology}
             COMMAND ${NUMARENA_LAB_RUN} --topology ${topology} -- $<TARGET_FILE:${target}>)
    set_tests_properties(lab.${target}.${topology} PROPERTIES LABELS lab TIMEOUT 600
                         RESOURCE_LOCK numarena_lab_cpu)
  endforeach()
endfunction()
