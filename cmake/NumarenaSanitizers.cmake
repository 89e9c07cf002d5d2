# NUMARENA_SANITIZE=address builds everything with ASan+UBSan, =thread with TSan.
if(NUMARENA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(NUMARENA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT NUMARENA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "NUMARENA_SANITIZE must be '', 'address' or 'thread'")
endif()
