// The translation unit that builds the test binaries' precompiled header (tests/CMakeLists.txt,
// NUMAPLACE_TEST_PCH): its content is the header itself.
