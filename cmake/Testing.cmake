# GoogleTest comes from Debian's libgtest-dev (docs/dependencies.md).
find_package(GTest 1.10 REQUIRED CONFIG)
include(GoogleTest)

# verifuse_add_gtest(NAME SOURCES a.cpp b.cpp LIBS lib1 lib2 [LABELS isa])
# One executable per component; every TEST() becomes its own ctest entry. LABELS isa marks the
# suites whose results depend on the CPU tier: `make test` reruns them with the capability model
# capped to lower tiers (tests/run_tiers.py, `ctest -L isa`).
function(verifuse_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE VERIFUSE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "VERIFUSE_SOURCE_DIR=${PROJECT_SOURCE_DIR}" LABELS "${ARG_LABELS}")
endfunction()
