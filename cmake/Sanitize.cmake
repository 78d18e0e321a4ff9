# Checked builds, each in a build folder of its own (scripts/sanitize.sh uses build-asan/):
#
#   FLASHJIT_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer on every target; the first
#                      error aborts the process (-fno-sanitize-recover), so a test that hits
#                      undefined behaviour fails instead of printing a warning nobody reads.
#   FLASHJIT_FUZZ      libFuzzer coverage on every target and the fuzz targets of tests/fuzz/
#                      linked with libFuzzer's main (clang only). Without it, the same targets
#                      are built with a plain main() that replays their corpus as a ctest test.
option(FLASHJIT_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(FLASHJIT_FUZZ "Build the fuzz targets with libFuzzer (clang)" OFF)

if(FLASHJIT_SANITIZE)
  # -g1: line tables only, enough for the reports' stack traces at a fraction of full -g's cost.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=address,undefined)
endif()

if(FLASHJIT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FLASHJIT_FUZZ needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
