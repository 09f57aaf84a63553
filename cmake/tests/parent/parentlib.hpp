#pragma once
#include <cstddef>
// Fills n doubles placed by numaplace and returns how many pages were found on their block's node.
std::size_t parent_fill_and_check(std::size_t n);
