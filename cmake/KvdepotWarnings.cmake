# Warning and sanitizer flags shared by every kvdepot target (kvdepot_set_warnings(target)).
set(KVDEPOT_CXX_WARNINGS
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual
    -Wcast-align -Wformat=2 -Wimplicit-fallthrough -Wmissing-declarations)
if(KVDEPOT_WERROR)
  list(APPEND KVDEPOT_CXX_WARNINGS -Werror)
endif()

function(kvdepot_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${KVDEPOT_CXX_WARNINGS}>)
  if(KVDEPOT_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
endfunction()

if(KVDEPOT_SANITIZE)
  string(REPLACE "," ";" _kvd_san_list "${KVDEPOT_SANITIZE}")
  list(JOIN _kvd_san_list "," _kvd_san)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${_kvd_san}>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_kvd_san})
endif()
# GCC 12 warns (-Wtsan) that TSan does not model std::atomic_thread_fence, which Boost.Asio's
# fenced blocks use; Asio hands handlers between threads under its scheduler's mutex, which TSan
# does see.
if(KVDEPOT_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-Wno-tsan>)
endif()
