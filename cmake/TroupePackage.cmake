# The installed package. `cmake --install BUILD --prefix P` puts:
#   P/include/troupe/...       the public headers: troupe/troupe.hpp and what it includes, no more
#   P/lib/libtroupe_*.so       the layer libraries (finding each other through their RUNPATH $ORIGIN)
#   P/bin/troupe-*             the applications
#   P/lib/cmake/Troupe/        TroupeConfig.cmake, TroupeConfigVersion.cmake (SameMajorVersion) and
#                              the exported targets Troupe::kernels, graph, transport, transport_ucx, plan,
#                              actors, models, and Troupe::troupe for all of them
# The libraries are shared and link oneDNN, OpenBLAS, CAF and UCX privately, so the exported
# targets carry no dependency but Threads. tests/package checks the result from a clean prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(troupe_layer_libraries troupe_kernels troupe_graph troupe_transport troupe_transport_ucx troupe_plan troupe_actors troupe_models)
foreach(lib IN LISTS troupe_layer_libraries)
  string(REPLACE "troupe_" "" export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name} VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR} INSTALL_RPATH "$ORIGIN")
  target_include_directories(${lib} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

# Troupe::troupe: every layer, for a consumer that includes troupe/troupe.hpp.
add_library(troupe_all INTERFACE)
add_library(troupe::troupe ALIAS troupe_all)
set_target_properties(troupe_all PROPERTIES EXPORT_NAME troupe)
target_link_libraries(troupe_all INTERFACE ${troupe_layer_libraries} Threads::Threads)

set(troupe_apps_installed troupe-gpt troupe-sr troupe-serve troupe-launch troupe-trace troupe-report troupe-demo)
set_target_properties(${troupe_apps_installed} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS ${troupe_layer_libraries} troupe_all EXPORT TroupeTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ${troupe_apps_installed} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The public headers: troupe/troupe.hpp and exactly the headers it includes, directly or not.
# Another header a public one starts including fails the package test until it is listed here.
set(troupe_public_headers
  kernels/include/troupe/kernels/allocator.hpp kernels/include/troupe/kernels/device.hpp
  kernels/include/troupe/kernels/dtype.hpp kernels/include/troupe/kernels/error.hpp
  kernels/include/troupe/kernels/arena_layout.hpp kernels/include/troupe/kernels/dropout.hpp kernels/include/troupe/kernels/optim.hpp
  kernels/include/troupe/kernels/planned_memory.hpp kernels/include/troupe/kernels/registry.hpp
  kernels/include/troupe/kernels/rng.hpp kernels/include/troupe/kernels/shape.hpp
  kernels/include/troupe/kernels/storage.hpp kernels/include/troupe/kernels/tensor.hpp
  kernels/include/troupe/kernels/threading.hpp
  graph/include/troupe/graph/amp.hpp graph/include/troupe/graph/collectives.hpp
  graph/include/troupe/graph/custom_gradient.hpp graph/include/troupe/graph/sharding.hpp
  graph/include/troupe/graph/debug.hpp graph/include/troupe/graph/dropout.hpp graph/include/troupe/graph/grad_scaler.hpp
  graph/include/troupe/graph/graph.hpp graph/include/troupe/graph/arena_layouts.hpp
  graph/include/troupe/graph/module.hpp graph/include/troupe/graph/nn.hpp graph/include/troupe/graph/ops.hpp
  graph/include/troupe/graph/pipeline_stage.hpp
  graph/include/troupe/graph/lr_schedule.hpp graph/include/troupe/graph/optim.hpp graph/include/troupe/graph/safetensors.hpp
  graph/include/troupe/graph/sym_shape.hpp graph/include/troupe/graph/trace.hpp graph/include/troupe/graph/var.hpp
  transport/include/troupe/transport/bootstrap.hpp transport/include/troupe/transport/inprocess.hpp
  transport/include/troupe/transport/process_group.hpp transport/include/troupe/transport/transport.hpp
  transport/include/troupe/transport/ucx.hpp
  plan/include/troupe/plan/cost_model.hpp plan/include/troupe/plan/mesh_search.hpp
  plan/include/troupe/plan/placement.hpp plan/include/troupe/plan/stages.hpp plan/include/troupe/plan/pipeline_cost.hpp
  actors/include/troupe/actors/engine.hpp actors/include/troupe/actors/program.hpp
  actors/include/troupe/actors/job.hpp actors/include/troupe/actors/parallel_training.hpp
  actors/include/troupe/actors/step_report.hpp actors/include/troupe/actors/tensor_parallel.hpp
  actors/include/troupe/actors/trace_summary.hpp actors/include/troupe/actors/tracer.hpp
  models/include/troupe/models/checkpoint.hpp models/include/troupe/models/gpt.hpp
  models/include/troupe/models/gpt_decoder.hpp models/include/troupe/models/gpt_placement.hpp
  models/include/troupe/models/gpt2.hpp models/include/troupe/models/gpt2_tokenizer.hpp
  models/include/troupe/models/saved.hpp
  models/include/troupe/models/sr_lite.hpp)
foreach(header IN LISTS troupe_public_headers)
  string(REGEX REPLACE "^[a-z]+/include/(.*)/[^/]+$" "\\1" folder ${header})
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${folder})
endforeach()
install(FILES models/include/troupe/troupe.hpp ${PROJECT_BINARY_DIR}/generated/include/troupe/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe)

set(troupe_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Troupe)
install(EXPORT TroupeTargets NAMESPACE Troupe:: DESTINATION ${troupe_cmake_dir})
configure_package_config_file(cmake/TroupeConfig.cmake.in ${PROJECT_BINARY_DIR}/TroupeConfig.cmake
                              INSTALL_DESTINATION ${troupe_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TroupeConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TroupeConfig.cmake ${PROJECT_BINARY_DIR}/TroupeConfigVersion.cmake
        DESTINATION ${troupe_cmake_dir})
