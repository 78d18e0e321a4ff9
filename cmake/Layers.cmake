# The library is built in layers, each an object library of its own folder:
#
#   base      status, hashing, variants, shapes: primitives everyone uses
#   cudalib   the CUDA driver and NVRTC, opened at run time (sees base)
#   cache     the on-disk kernel cache            (sees base)
#   autotune  tuning keys, the tuner, its store   (sees base, cache: results live in the cache folder)
#   templates the embedded kernel sources         (sees nothing)
#   engine    families, compiling, launching, the API (sees all of the above)
#
# A layer includes other folders' headers root-relative ("base/content_hash.hpp"). The build
# enforces who sees what: each layer's include root is a private folder in the build tree that
# links only the folders it may use, so "engine/src/..." from cache/ does not compile. The tools
# get such a view too (tools/CMakeLists.txt): the public API, base, cudalib and cache.

# flashjit_view(<var> <name> <folder>...): a folder of the build tree holding links to these
# folders only, its path in <var>: an include root from which "<folder>/..." resolves for them alone.
function(flashjit_view var name)
  set(view ${PROJECT_BINARY_DIR}/layer-views/${name})
  file(MAKE_DIRECTORY ${view})
  foreach(dir ${ARGN})
    if(NOT EXISTS ${view}/${dir})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${view}/${dir} SYMBOLIC)
    endif()
  endforeach()
  set(${var} ${view} PARENT_SCOPE)
endfunction()

# flashjit_layer_sees(<target> <folder>...): <target> may include "<folder>/..." for these only.
function(flashjit_layer_sees target)
  flashjit_view(view ${target} ${ARGN})
  target_include_directories(${target} PRIVATE ${view})
endfunction()

# flashjit_layer(<name> SEES <folder>... SOURCES <file>...): the object library flashjit_<name>.
function(flashjit_layer name)
  cmake_parse_arguments(L "" "" "SEES;SOURCES" ${ARGN})
  set(target flashjit_${name})
  add_library(${target} OBJECT ${L_SOURCES})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/engine/include> $<INSTALL_INTERFACE:include>)
  target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${XXHASH_INCLUDE_DIR})
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  flashjit_layer_sees(${target} ${name} ${L_SEES})
  set_property(GLOBAL APPEND PROPERTY FLASHJIT_LAYERS ${target})
endfunction()
