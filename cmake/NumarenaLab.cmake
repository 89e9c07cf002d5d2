# The NUMA lab in CTest: numarena_add_lab_test(target source) adds one test per topology,
#   lab.<target>.<topology>  =  cmake/lab/run.sh --topology <topology> -- <binary>
# labelled "lab" (so `ctest -L lab` runs exactly these, `ctest -LE lab` everything else).
# The topologies come from a "// lab-topologies: a b c" line in the source, default all four;
# a "// lab-files: target ..." line copies more build targets into the VM; a
# "// lab-share: /usr" line shows the VM those host folders read-only instead of copying the
# libraries in them (run.sh --share; for libtorch's 470 MB of libraries); a
# "// lab-timeout: SECONDS [why]" line raises the VM's limit for that test (never lowers it).
# Kernels: every test runs on Debian 12's 6.1 (lab.<target>.<topology>); a line
# "// lab-kernel-6.12: 2s cxl" also runs it on Debian 12's 6.12 in those topologies
# (lab.<target>.<topology>.linux6.12). CI time allows 6.12 only for a named subset, which
# docs/lab.md lists; sanitizer builds run 6.1 only (the 6.12 runs prove the kernel, not the
# code, which the 6.1 runs already check under the sanitizer).
# run.sh boots QEMU (see cmake/lab/README.md) and returns the binary's exit status; logs of
# failed runs go to <build>/lab-logs.
#
# Parallel runs: each VM is independent (own work dir, own initramfs, no shared ports or
# files), so there is no RESOURCE_LOCK: `ctest -jN` runs up to N VMs. A TCG VM keeps about
# one host core busy (tests are mostly single-threaded; idle vCPUs halt), so -j2 on a 2-core
# machine runs two VMs at close to full speed instead of serialising ~8 s runs.
set(NUMARENA_LAB_TOPOLOGIES 2s snc4 cxl tiny)
set(NUMARENA_LAB_RUN ${CMAKE_CURRENT_LIST_DIR}/lab/run.sh)
# run.sh's own limit (it kills the VM and says so); ctest's TIMEOUT is a backstop above it.
set(NUMARENA_LAB_TIMEOUT 300 CACHE STRING "Seconds a lab test's VM may run")

function(numarena_add_lab_test target source)
  file(STRINGS ${source} spec REGEX "^// lab-topologies:")
  set(topologies ${NUMARENA_LAB_TOPOLOGIES})
  if(spec)
    string(REGEX REPLACE "^// lab-topologies:[ ]*" "" spec "${spec}")
    separate_arguments(topologies UNIX_COMMAND "${spec}")
  endif()
  # "// lab-files: target ..." copies those targets' files (and the libraries they need) into
  # the VM at their build-tree paths (run.sh --file), for tests that run other programs.
  file(STRINGS ${source} files_spec REGEX "^// lab-files:")
  set(file_args)
  if(files_spec)
    string(REGEX REPLACE "^// lab-files:[ ]*" "" files_spec "${files_spec}")
    separate_arguments(file_targets UNIX_COMMAND "${files_spec}")
    foreach(file_target ${file_targets})
      list(APPEND file_args --file $<TARGET_FILE:${file_target}>)
      add_dependencies(${target} ${file_target})
    endforeach()
  endif()
  # Files that are not targets: the caller sets NUMARENA_LAB_EXTRA_FILES_<target> (paths).
  foreach(path ${NUMARENA_LAB_EXTRA_FILES_${target}})
    list(APPEND file_args --file ${path})
  endforeach()
  file(STRINGS ${source} share_spec REGEX "^// lab-share:")
  if(share_spec)
    string(REGEX REPLACE "^// lab-share:[ ]*" "" share_spec "${share_spec}")
    separate_arguments(share_dirs UNIX_COMMAND "${share_spec}")
    foreach(share_dir ${share_dirs})
      list(APPEND file_args --share ${share_dir})
    endforeach()
  endif()
  set(timeout ${NUMARENA_LAB_TIMEOUT})
  file(STRINGS ${source} timeout_spec REGEX "^// lab-timeout:")
  if(timeout_spec)
    # The number, then an optional reason.
    string(REGEX MATCH "^// lab-timeout:[ ]*([0-9]+)" timeout_match "${timeout_spec}")
    if(NOT timeout_match)
      message(FATAL_ERROR "${source}: '// lab-timeout:' wants a number of seconds")
    endif()
    if(CMAKE_MATCH_1 GREATER timeout)
      set(timeout ${CMAKE_MATCH_1})
    endif()
  endif()
  file(STRINGS ${source} kernel_spec REGEX "^// lab-kernel-6.12:")
  set(topologies_612)
  if(kernel_spec AND NOT NUMARENA_SANITIZE)
    string(REGEX REPLACE "^// lab-kernel-6.12:[ ]*" "" kernel_spec "${kernel_spec}")
    separate_arguments(topologies_612 UNIX_COMMAND "${kernel_spec}")
  endif()
  foreach(topology ${topologies_612})
    if(NOT topology IN_LIST topologies)
      message(FATAL_ERROR "${source}: '// lab-kernel-6.12:' names topology '${topology}', "
                          "which its '// lab-topologies:' line does not")
    endif()
  endforeach()
  foreach(topology ${topologies})
    if(NOT EXISTS ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/lab/topologies/${topology}.sh)
      message(FATAL_ERROR "${source}: no lab topology '${topology}' "
                          "(cmake/lab/topologies/${topology}.sh)")
    endif()
    add_test(NAME lab.${target}.${topology}
             COMMAND ${NUMARENA_LAB_RUN} --topology ${topology} --timeout ${timeout}
                     ${file_args} -- $<TARGET_FILE:${target}>)
    math(EXPR ctest_timeout "${timeout} + 120")
    set_tests_properties(lab.${target}.${topology} PROPERTIES
      LABELS lab
      TIMEOUT ${ctest_timeout}
      ENVIRONMENT "NUMARENA_LAB_LOG_DIR=${CMAKE_BINARY_DIR}/lab-logs")
    if(topology IN_LIST topologies_612)
      add_test(NAME lab.${target}.${topology}.linux6.12
               COMMAND ${NUMARENA_LAB_RUN} --topology ${topology} --kernel 6.12
                       --timeout ${timeout} ${file_args} -- $<TARGET_FILE:${target}>)
      set_tests_properties(lab.${target}.${topology}.linux6.12 PROPERTIES
        LABELS "lab;linux6.12"
        TIMEOUT ${ctest_timeout}
        ENVIRONMENT "NUMARENA_LAB_LOG_DIR=${CMAKE_BINARY_DIR}/lab-logs")
    endif()
  endforeach()
endfunction()
