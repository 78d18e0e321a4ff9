# flashjit_find_torch_dir(<out>): the installed torch package folder (site-packages/torch) whose
# headers torch_op/ and eager/ build against, never a download: FLASHJIT_TORCH_DIR, else asked of
# FLASHJIT_TORCH_PYTHON, else of the Python building the wheel. Empty where none is found.
set(FLASHJIT_TORCH_DIR "" CACHE PATH "The torch package folder to build the torch op against (empty: ask Python)")
set(FLASHJIT_TORCH_PYTHON "" CACHE FILEPATH "A Python that imports torch, to find it (empty: the building Python)")

function(flashjit_find_torch_dir out)
  set(torch_dir "${FLASHJIT_TORCH_DIR}")
  if(NOT torch_dir)
    set(python "${FLASHJIT_TORCH_PYTHON}")
    set(env "")
    if(python)  # its own packages: not the path of pip's isolated build environment
      set(env ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE)
    else()
      find_package(Python COMPONENTS Interpreter QUIET)
      set(python "${Python_EXECUTABLE}")
    endif()
    if(python)
      # The package's folder without importing torch (seconds, and it may touch the GPU).
      execute_process(
        COMMAND ${env} "${python}" -c "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
        OUTPUT_VARIABLE torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        set(torch_dir "")
      endif()
    endif()
  endif()
  set(${out} "${torch_dir}" PARENT_SCOPE)
endfunction()
