# HVL_SANITIZE=address -> AddressSanitizer + UndefinedBehaviorSanitizer
# HVL_SANITIZE=thread  -> ThreadSanitizer
if(HVL_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(HVL_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT HVL_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HVL_SANITIZE must be empty, 'address' or 'thread', not '${HVL_SANITIZE}'")
endif()
