# numarena::torch's tests (included from tests/CMakeLists.txt when the component is built).
# Few and fast: each is one process that loads libtorch once.
#   torch_allocator_test   the C++ allocator and scopes (Catch2), label "torch"
#   torch_kv_test          KV-pool blocks as tensors (torch_kv.hpp), label "torch"
foreach(name torch_allocator_test torch_kv_test)
  numarena_check_test_names(${CMAKE_CURRENT_SOURCE_DIR}/torch/${name}.cpp)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/torch/${name}.cpp)
  target_link_libraries(${name} PRIVATE numarena::torch numarena_torch_aten numarena::numarena
                                        numarena_catch_main)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;torch" TIMEOUT 120)
endforeach()

# numarena.torch from Python (tests/python/test_torch.py), label "python;torch": needs
# libnumarena.so and an interpreter that imports torch (Debian's python3-torch is
# /usr/bin/python3's; a pyenv or venv python3 first on PATH usually lacks it).
if(TARGET numarena_torch_shared)
  set(NUMARENA_TORCH_PYTHON "")
  foreach(candidate /usr/bin/python3 ${Python3_EXECUTABLE})
    if(EXISTS ${candidate})
      execute_process(COMMAND ${candidate} -c "import torch" RESULT_VARIABLE no_torch
                      OUTPUT_QUIET ERROR_QUIET)
      if(no_torch EQUAL 0)
        set(NUMARENA_TORCH_PYTHON ${candidate})
        break()
      endif()
    endif()
  endforeach()
  if(NUMARENA_TORCH_PYTHON)
    add_test(NAME "python: numarena.torch"
             COMMAND ${CMAKE_COMMAND} -E env NUMARENA_LIBRARY=$<TARGET_FILE:numarena_shared>
                     NUMARENA_TORCH_LIBRARY=$<TARGET_FILE:numarena_torch_shared>
                     PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
                     ${NUMARENA_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_torch.py)
    set_tests_properties("python: numarena.torch" PROPERTIES LABELS "shared;python;torch"
                                                             TIMEOUT 180)
    # The example decoder (examples/pytorch_decoder.py): its paged KV cache in numarena's pool
    # must produce the same tokens as a dense cache (--check); small sizes, a few seconds.
    add_test(NAME "example: pytorch decoder on numarena"
             COMMAND ${CMAKE_COMMAND} -E env NUMARENA_LIBRARY=$<TARGET_FILE:numarena_shared>
                     NUMARENA_TORCH_LIBRARY=$<TARGET_FILE:numarena_torch_shared>
                     PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
                     ${NUMARENA_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/examples/pytorch_decoder.py
                     --check --layers 2 --batch 2 --prompt 40 --generate 6 --tensors local)
    set_tests_properties("example: pytorch decoder on numarena" PROPERTIES
                         LABELS "python;torch;examples" TIMEOUT 180)
    # The decoder's benchmark driver (bench/pytorch_decoder_bench.py) end to end: every
    # configuration's worker, the lockstep turns, the report's ratios, its refusals. Needs the
    # numarena CLI (`numarena run`) and the peers' libraries (tools/dev.sh installs them).
    if(TARGET numarena_cli)
      add_test(NAME "bench: pytorch_decoder_bench.py runs every configuration in lockstep"
               COMMAND ${NUMARENA_TORCH_PYTHON}
                       ${PROJECT_SOURCE_DIR}/tests/bench/pytorch_decoder_bench_smoke_test.py
                       ${CMAKE_BINARY_DIR})
      set_tests_properties("bench: pytorch_decoder_bench.py runs every configuration in lockstep"
                           PROPERTIES LABELS "python;torch;preload" TIMEOUT 300)
    endif()
  else()
    message(STATUS "numarena.torch's Python tests skipped: no python3 imports torch "
                   "(apt-get install python3-torch)")
  endif()
endif()

# The NUMA lab (tests/torch/torch_lab.cpp, label "lab"): lab.torch_lab.2s and .cxl. Kept here,
# not in tests/lab/, because it exists only when numarena::torch is built.
add_executable(torch_lab ${CMAKE_CURRENT_SOURCE_DIR}/torch/torch_lab.cpp)
target_link_libraries(torch_lab PRIVATE numarena::torch numarena_torch_aten numarena::numarena
                                        numarena_catch_main)
target_include_directories(torch_lab PRIVATE ${PROJECT_SOURCE_DIR}/lib)  # lab_support.hpp: os/
target_compile_options(torch_lab PRIVATE -Wall -Wextra)
numarena_add_lab_test(torch_lab ${CMAKE_CURRENT_SOURCE_DIR}/torch/torch_lab.cpp)

# numarena.torch from Python in the NUMA lab (tests/torch/torch_lab.py, labels "lab",
# "python", "torch"): lab.torch_python_lab.cxl. One topology: importing torch costs about two
# minutes of TCG time (libtorch's static initialisers; 2-3 s on the host), and cxl holds every
# claim (two CPU nodes as in 2s, and the slow node for the KV cold tier). The VM sees the host's /usr read-only
# (run.sh --share /usr: Debian's python3, python3-torch and libtorch); the numarena package,
# the libraries (with numarena._buffer, built beside libnumarena.so), the test and the example
# decoder are copied in.
if(NUMARENA_TORCH_PYTHON)
  file(GLOB torch_lab_package_files ${PROJECT_SOURCE_DIR}/python/numarena/*.py)
  set(torch_lab_files)
  foreach(path ${torch_lab_package_files} ${CMAKE_CURRENT_SOURCE_DIR}/torch/torch_lab.py
               ${CMAKE_CURRENT_SOURCE_DIR}/lab/python_lab.py
               ${PROJECT_SOURCE_DIR}/examples/pytorch_decoder.py)
    list(APPEND torch_lab_files --file ${path})
  endforeach()
  foreach(topology cxl)
    add_test(NAME lab.torch_python_lab.${topology}
             COMMAND ${NUMARENA_LAB_RUN} --topology ${topology} --timeout 600 --share /usr
                     ${torch_lab_files} --file $<TARGET_FILE:numarena_shared>
                     --file $<TARGET_FILE:numarena_torch_shared>
                     --file $<TARGET_FILE_DIR:numarena_shared>/_buffer.abi3.so
                     --env NUMARENA_LIBRARY=$<TARGET_FILE:numarena_shared>
                     --env NUMARENA_TORCH_LIBRARY=$<TARGET_FILE:numarena_torch_shared>
                     --env PYTHONPATH=${PROJECT_SOURCE_DIR}/python
                     --env PYTHONDONTWRITEBYTECODE=1
                     -- ${NUMARENA_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/torch/torch_lab.py
                        ${CMAKE_CURRENT_SOURCE_DIR}/lab ${PROJECT_SOURCE_DIR}/examples)
    set_tests_properties(lab.torch_python_lab.${topology} PROPERTIES
      LABELS "lab;python;torch" TIMEOUT 720
      ENVIRONMENT "NUMARENA_LAB_LOG_DIR=${CMAKE_BINARY_DIR}/lab-logs")
  endforeach()
endif()
