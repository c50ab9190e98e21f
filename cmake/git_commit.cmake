# Writes ${OUT} with `#define DIFFQ_GIT_COMMIT "<short hash>[-dirty]"` (or "unknown" outside a git
# checkout), rewriting it only when the value changes so that nothing rebuilds needlessly. Run at every
# build by the diffq_git_commit target (CMakeLists.txt).
set(commit "unknown")
find_program(GIT git)
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE hash
                  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND hash)
    set(commit "${hash}")
    execute_process(COMMAND ${GIT} -C ${SRC} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE dirty RESULT_VARIABLE rc2 ERROR_QUIET)
    if(rc2 EQUAL 0 AND NOT dirty STREQUAL "")
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
set(content "#pragma once\n#define DIFFQ_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUT} "${content}")
endif()
